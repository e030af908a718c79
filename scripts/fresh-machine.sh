#!/usr/bin/env bash
# The README's two commands on a machine that has never run them (.ci/run; docs/testing.md).
#
# A fresh container of the Debian base that scripts/build-image.sh bootstraps
# (BOOTSTRAP_BASE=1; scripts/ci-image.sh does it in CI), holding a clean clone of HEAD and
# nothing else: no .venv, no pip or build cache, no /etc/kubernetes, an empty HOME, and no
# ../shared beside the clone (a user's clone has none). In it: Debian's packages for what
# the README asks of a machine (Python 3.11+ with its venv module and headers, gcc, make),
# then `make demo` and `make test`, word for word; the suite's host guard
# (tests/host_guard.py) holds the container to the same rules as any machine.
# Environment: DOCKER (default /usr/bin/docker), FRESH_BASE (default the Dockerfile's
# BASE_IMAGE), PIP_CERT (a CA bundle pip needs here, mounted read-only, never copied).
set -euo pipefail
cd "$(dirname "$0")/.."

docker=${DOCKER:-/usr/bin/docker}
base=${FRESH_BASE:-$(sed -n 's/^ARG BASE_IMAGE=//p' Dockerfile)}
if ! "$docker" image inspect "$base" >/dev/null 2>&1; then
    echo "fresh-machine: no image $base; make it first (scripts/ci-image.sh, or" \
        "BOOTSTRAP_BASE=1 scripts/build-image.sh)" >&2
    exit 2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# What is committed, nothing else: no .venv, no build output, no untracked file.
git clone --quiet --no-hardlinks "$PWD" "$work/gfd"

extra=()
if [[ -n ${PIP_CERT:-} && -f $PIP_CERT ]]; then
    extra+=(--volume "$PIP_CERT:/run/fresh-machine/pip-cert.pem:ro"
        --env PIP_CERT=/run/fresh-machine/pip-cert.pem)
fi

"$docker" run --rm --init --volume "$work/gfd:/src/gfd" --workdir /src/gfd \
    --env HOME=/root --env CI "${extra[@]}" "$base" bash -euo pipefail -c '
        step() { echo "fresh-machine: $1: $(($(date +%s) - $2)) s"; }
        started=$(date +%s)
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null
        apt-get install -y -qq --no-install-recommends python3 python3-venv python3-dev \
            gcc libc6-dev make ca-certificates >/dev/null
        step "Python $(python3 -c "import platform; print(platform.python_version())"), gcc and make installed" "$started"
        for state in .venv /etc/kubernetes "$HOME/.cache" "$HOME/.kube" "$HOME/.config"; do
            if [[ -e $state ]]; then echo "fresh-machine: $state exists: not fresh" >&2; exit 1; fi
        done
        started=$(date +%s)
        make demo
        step "make demo" "$started"
        started=$(date +%s)
        make test
        step "make test" "$started"
    '
