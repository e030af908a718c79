#!/usr/bin/env bash
# Build gfd's container image: scripts/build-image.sh [IMAGE]   (default gfd:<version>)
#
# Uses the Dockerfile at the repository root, unchanged, with BuildKit. Environment:
#   DOCKER       container engine client (default: Debian's /usr/bin/docker when present,
#                since another docker earlier on PATH may insist on the buildx plugin)
#   BASE_IMAGE   base of both stages (default: the Dockerfile's ARG BASE_IMAGE, an exact
#                Debian point-release tag; when it can be pulled it is pinned by digest)
#   PIP_CERT     a CA bundle pip needs to reach the package index; passed as a BuildKit
#                secret, never stored in the image
#   BOOTSTRAP_BASE=1  when BASE_IMAGE is neither present nor pullable (no registry
#                reachable), make it from Debian's packages with debootstrap (root only);
#                BOOTSTRAP_SUITE picks the Debian release (default bookworm)
#   SBOM         where to write the CycloneDX SBOM of the image's Python packages
#                (default dist/<image, ':' and '/' as '_'>.cdx.json); SBOM=0 skips it
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' gfd/__init__.py)
image=${1:-gfd:${version}}
dockerfile_base=$(sed -n 's/^ARG BASE_IMAGE=//p' Dockerfile)
base=${BASE_IMAGE:-$dockerfile_base}

if [[ -z ${DOCKER:-} ]]; then
    if [[ -x /usr/bin/docker ]]; then DOCKER=/usr/bin/docker; else DOCKER=$(command -v docker || true); fi
fi
if [[ -z $DOCKER ]]; then
    echo "build-image: no container engine client (docker) found; install one (Debian: apt-get install docker.io)" >&2
    exit 2
fi
if ! "$DOCKER" info >/dev/null 2>&1; then
    echo "build-image: $DOCKER cannot reach a daemon; start it (e.g. dockerd &) and retry" >&2
    exit 2
fi

debian_mirror() {
    # The mirror this machine's apt already uses: deb822 sources first, then the
    # one-line format.
    local uri
    uri=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)
    if [[ -z $uri && -r /etc/apt/sources.list ]]; then
        uri=$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' /etc/apt/sources.list)
    fi
    [[ -n $uri ]] || { echo "build-image: no Debian mirror found in apt's sources" >&2; return 1; }
    echo "$uri"
}

bootstrap_base() {
    local suite=${BOOTSTRAP_SUITE:-bookworm}
    command -v debootstrap >/dev/null || {
        echo "build-image: $base is missing and debootstrap is not installed (apt-get install debootstrap)" >&2
        exit 2
    }
    local rootfs mirror
    mirror=$(debian_mirror)
    rootfs=$(mktemp -d)
    trap 'rm -rf "$rootfs"' RETURN
    echo "build-image: making $base from Debian $suite packages ($mirror)"
    debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" >/dev/null
    # apt inside the image must not keep the build host's package lists, nor the
    # packages debootstrap downloaded (115 MB that every layer above would carry).
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
        "$rootfs"/var/cache/apt/archives/*.deb
    # The tag names a point release (debian:12.15-slim): refuse to put that name on
    # another one, which is what the mirror serves once Debian has moved on.
    local wanted got
    wanted=$(sed -n 's/^debian:\([0-9][0-9.]*\)-slim$/\1/p' <<<"$base")
    got=$(cat "$rootfs/etc/debian_version")
    if [[ -n $wanted && $got != "$wanted" ]]; then
        echo "build-image: the mirror now serves Debian $got, not $wanted; update ARG BASE_IMAGE in the Dockerfile" >&2
        exit 2
    fi
    tar -C "$rootfs" -c . | "$DOCKER" import - "$base" >/dev/null
}

if ! "$DOCKER" image inspect "$base" >/dev/null 2>&1; then
    if ! "$DOCKER" pull "$base" >/dev/null 2>&1; then
        if [[ ${BOOTSTRAP_BASE:-0} == 1 ]]; then
            bootstrap_base
        else
            echo "build-image: base image $base is not present and cannot be pulled;" \
                "set BOOTSTRAP_BASE=1 to make it from Debian packages" >&2
            exit 2
        fi
    fi
fi

# Pin by digest whenever the base came from a registry: the build then names the exact
# bytes it used. A base made here (bootstrapped or imported) has no registry digest.
pinned=$base
digest=$("$DOCKER" image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$base" 2>/dev/null | head -n 1 || true)
if [[ $digest == *@sha256:* && $base != *@* ]]; then
    pinned="$base@${digest#*@}"
fi

build_args=(--build-arg "BASE_IMAGE=$pinned" --tag "$image")
if [[ -n ${PIP_CERT:-} && -s $PIP_CERT ]]; then
    build_args+=(--secret "id=pipcert,src=$PIP_CERT")
fi
if [[ -n ${DOCKER_BUILD_NETWORK:-} ]]; then
    build_args+=(--network "$DOCKER_BUILD_NETWORK")
fi

echo "build-image: building $image on $pinned"
DOCKER_BUILDKIT=1 "$DOCKER" build "${build_args[@]}" .
echo "build-image: built $image"

# The SBOM comes from the Dockerfile's sbom stage, which reuses the image's cached build
# stage: the tool describes the very /opt/gfd the image holds. BuildKit's local exporter
# writes the stage's one file; the image itself is not changed by this second build.
sbom=${SBOM:-dist/${image//[:\/]/_}.cdx.json}
if [[ $sbom != 0 ]]; then
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
    sbom_args=(--build-arg "BASE_IMAGE=$pinned" --target sbom --output "type=local,dest=$out")
    if [[ -n ${PIP_CERT:-} && -s $PIP_CERT ]]; then
        sbom_args+=(--secret "id=pipcert,src=$PIP_CERT")
    fi
    if [[ -n ${DOCKER_BUILD_NETWORK:-} ]]; then
        sbom_args+=(--network "$DOCKER_BUILD_NETWORK")
    fi
    DOCKER_BUILDKIT=1 "$DOCKER" build "${sbom_args[@]}" .
    mkdir -p "$(dirname "$sbom")"
    mv "$out/gfd.cdx.json" "$sbom"
    echo "build-image: SBOM of $image's Python packages (CycloneDX): $sbom"
fi
