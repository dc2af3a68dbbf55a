#!/usr/bin/env bash
# The zoo's reader of diffusers pipeline-test configurations
# (tests/gpu/zoo_pipeline_configs.py, issue 31), without torch: the ast reader
# follows names bound to literals (module level, function defaults, earlier
# assignments) and refuses an attribute, a name bound to a non-literal, a
# positional or ** argument, a missing call; drift's own configurations feed
# their input builders. The GPU side: tests/gpu/zoo.sh (the zoo itself), and
# `python3 tests/gpu/zoo_models.py --list-configs` against a diffusers checkout.
set -u
S=${DRIFT_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
exec "${PYTHON3:-python3}" "$S/tests/gpu/zoo_pipeline_configs.py" --self-test
