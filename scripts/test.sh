#!/usr/bin/env bash
# The test command: starts the servers the integration tests need, then runs every test of the
# workspace with every feature. Nothing is skipped for a missing server: it fails instead.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/prerequisites.sh
scripts/services.sh
cargo test --workspace --all-features "$@"
