#!/bin/bash
# The fake NCCL's own test (tests/fake/test_fake.c).
exec "$(dirname "$0")/../fake/test_fake"
