set -x
export NCCL_NVLS_ENABLE=0
nvidia-smi -L; python3 -c 'import torch,sys; print(torch.__version__, torch.cuda.device_count(), sys.version)'
python3 -c 'import nvidia.nccl, os; p=os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0]; print(p); os.system("ls -R "+p+" | head -30")'
python3 -c 'import nccl; print(nccl.__file__)' 2>&1 | tail -1
python3 -c 'import cupy_backends.cuda.libs.nccl as n; print(n.__file__)' 2>&1 | tail -1
ldd $(python3 -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"lib/libtorch_cuda.so"))') | grep -i nccl
cat > /tmp/ar.py <<'PY'
import torch, torch.distributed as dist, os
dist.init_process_group("nccl")
r=dist.get_rank(); torch.cuda.set_device(r)
x=torch.ones(1024,device="cuda")*(r+1); dist.all_reduce(x); torch.cuda.synchronize(); print("sum",x[0].item())
dist.destroy_process_group()
PY
cd /tmp && NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV torchrun --nproc_per_node=2 /tmp/ar.py > $OUT/nccl_info_p2p.log 2>&1
NCCL_DEBUG=INFO NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket torchrun --nproc_per_node=2 /tmp/ar.py > $OUT/nccl_info_socket.log 2>&1
grep -c NCCL $OUT/*.log
