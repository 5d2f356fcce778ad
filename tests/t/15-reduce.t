#!/bin/bash
. "$(dirname "$0")/../built.sh" && need_built "$(dirname "$0")/../bin/test_reduce"
exec "$(dirname "$0")/../bin/test_reduce"
