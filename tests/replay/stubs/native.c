/* The stand-in for an inference engine's native code (vllm/_C.abi3.so,
 * sgl_kernel/sm90/common_ops.abi3.so, ...): the replays copy it to each path
 * a stack's process really loads, and dlopen it there, so that the shim finds
 * the library among the process's loaded objects.  It calls nothing. */
int replay_native_stub(void);
int replay_native_stub(void)
{
    return 42;
}
