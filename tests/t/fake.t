#!/bin/bash
# The fake NCCL's own test (tests/fake/test_fake.c).
. "$(dirname "$0")/../built.sh" && need_built "$(dirname "$0")/../fake/test_fake"
exec "$(dirname "$0")/../fake/test_fake"
