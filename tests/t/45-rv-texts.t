#!/bin/bash
exec "$(dirname "$0")/../bin/test_rv_texts"
