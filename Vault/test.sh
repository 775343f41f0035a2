#!/usr/bin/env bash
# Installs what the tests need, builds, and runs every test (unit, libfprint virtual readers, the
# built binary). Usage: ./Vault/test.sh [swift test options]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/setup.sh"
cd "$here/.."
swift build --build-tests >&2
exec swift test --skip-build "$@"
