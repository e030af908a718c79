#!/usr/bin/env bash
# Best effort, for CI: make a container engine available and build gfd's image, so that
# tests/deploy/test_image.py runs the image instead of skipping.
#
# Installs Debian's docker.io and debootstrap when missing (root), starts dockerd in the
# background when no daemon answers (its pid goes to $GFD_DOCKERD_PID_FILE so the caller
# can stop it), then runs scripts/build-image.sh with BOOTSTRAP_BASE=1, because no image
# registry is reachable from these machines. Exits non-zero, saying why, when any step
# cannot be done; the caller carries on and the image tests skip with their reason.
set -euo pipefail
cd "$(dirname "$0")/.."

pid_file=${GFD_DOCKERD_PID_FILE:-/tmp/gfd-ci-dockerd.pid}
docker_cli=/usr/bin/docker

if [[ ! -x $docker_cli ]] || ! command -v debootstrap >/dev/null || ! command -v dockerd >/dev/null; then
    if [[ $(id -u) != 0 ]]; then
        echo "ci-image: docker.io/debootstrap missing and not root: cannot install them" >&2
        exit 2
    fi
    echo "ci-image: installing docker.io and debootstrap"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap >/dev/null
fi

if ! "$docker_cli" info >/dev/null 2>&1; then
    echo "ci-image: starting dockerd"
    dockerd >/tmp/gfd-ci-dockerd.log 2>&1 &
    echo $! >"$pid_file"
    for _ in $(seq 1 60); do
        "$docker_cli" info >/dev/null 2>&1 && break
        sleep 1
    done
    if ! "$docker_cli" info >/dev/null 2>&1; then
        echo "ci-image: dockerd did not come up; last lines of its log:" >&2
        tail -n 5 /tmp/gfd-ci-dockerd.log >&2 || true
        exit 2
    fi
fi

DOCKER=$docker_cli BOOTSTRAP_BASE=1 scripts/build-image.sh
