#!/usr/bin/env bash
# The old name of scripts/setup.sh, kept for old habits.
exec "$(dirname "$0")/setup.sh" "$@"
