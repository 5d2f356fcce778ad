#!/bin/bash
# The fake libcuda's own test (tests/fake/test_fake_cuda.c), run from the
# repository root so that its default path of the fake holds.
cd "$(dirname "$0")/../.." && exec tests/bin/test_fake_cuda tests/fake/cuda/libcuda.so.1
