#!/usr/bin/env bash
# For CI: make a container engine available and build gfd's images, amd64 and arm64, so
# that tests/deploy/test_image*.py run them.
#
# Installs Debian's docker.io, debootstrap and buildah, and qemu-user-static with binfmt-support
# (the arm64 build and image run under emulation), when missing (root); checks that the
# kernel runs arm64 binaries through qemu with the F flag (the interpreter opened at
# registration, so that it works inside containers too); starts dockerd in the background
# when no daemon answers (its pid goes to $GFD_DOCKERD_PID_FILE so the caller can stop it);
# then runs scripts/build-image.sh with BOOTSTRAP_BASE=1, because no image registry is
# reachable from these machines, for PLATFORMS (default linux/amd64,linux/arm64), with the
# test suite's packages for each (IMAGE_TEST_DEPS=1). Exits non-zero, saying why, when
# any step cannot be done.
set -euo pipefail
cd "$(dirname "$0")/.."

pid_file=${GFD_DOCKERD_PID_FILE:-/tmp/gfd-ci-dockerd.pid}
docker_cli=/usr/bin/docker

platforms=${PLATFORMS:-linux/amd64,linux/arm64}
# buildah makes the image index (scripts/build-image.sh).
packages=(docker.io debootstrap buildah)
[[ $platforms != *linux/arm64* ]] || packages+=(qemu-user-static binfmt-support)
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f '${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' \
        || missing+=("$package")
done
if ((${#missing[@]})); then
    if [[ $(id -u) != 0 ]]; then
        echo "ci-image: ${missing[*]} missing and not root: cannot install them" >&2
        exit 2
    fi
    echo "ci-image: installing ${missing[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [[ $platforms == *linux/arm64* && $(uname -m) != aarch64 ]]; then
    binfmt=/proc/sys/fs/binfmt_misc
    if [[ ! -e $binfmt/register ]]; then
        mount -t binfmt_misc binfmt_misc "$binfmt" 2>/dev/null || true
    fi
    if [[ ! -e $binfmt/qemu-aarch64 ]]; then
        update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
    fi
    if ! grep -qx enabled "$binfmt/qemu-aarch64" 2>/dev/null \
        || ! grep -q '^flags: .*F' "$binfmt/qemu-aarch64"; then
        echo "ci-image: arm64 binaries do not run here: no enabled qemu-aarch64 binfmt entry" \
            "with the F flag in $binfmt (install qemu-user-static and binfmt-support)" >&2
        exit 2
    fi
    echo "ci-image: arm64 runs under $(sed -n 's/^interpreter //p' "$binfmt/qemu-aarch64")" \
        "($(sed -n 's/^flags: //p' "$binfmt/qemu-aarch64"))"
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

DOCKER=$docker_cli BOOTSTRAP_BASE=1 PLATFORMS=$platforms IMAGE_TEST_DEPS=1 scripts/build-image.sh
