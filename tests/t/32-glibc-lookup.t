#!/bin/bash
. "$(dirname "$0")/../built.sh" && need_built "$(dirname "$0")/../bin/test_loader"
exec "$(dirname "$0")/../bin/test_loader"
