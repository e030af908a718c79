#!/usr/bin/env bash
# Build gfd's container image: scripts/build-image.sh [IMAGE]   (default gfd:<version>)
#
# Uses the Dockerfile at the repository root, unchanged, with BuildKit, once per platform.
# Each platform's image is tagged IMAGE-ARCH (gfd:0.1.0-amd64, gfd:0.1.0-arm64), and the
# build machine's own architecture also plain IMAGE. Then the one reference a fleet pulls:
# an OCI image index of every platform built, under IMAGE's tag, written as an OCI archive
# to DIST_DIR/<IMAGE, ':' and '/' as '_'>.oci.tar (docs/container.md, "One reference for
# both architectures"). Docker 20.10 cannot make an index without a registry (docker
# manifest works on pushed images only), so Debian's buildah makes it, in a storage of its
# own that lives as long as this run: buildah is the one of Debian's image tools (buildah,
# skopeo, umoci) that assembles an index from images; skopeo copies one and umoci edits a
# single image. INDEX=0 skips it.
# Environment:
#   PLATFORMS    comma-separated linux/amd64, linux/arm64 (default: both, as the fleet's
#                nodes are; linux/<this machine's> alone for a quick build). A platform
#                other than this machine's runs its build under qemu-user-static (binfmt
#                with the F flag)
#   BUILDAH      the buildah that makes the index (default: buildah on PATH; Debian:
#                apt-get install buildah)
#   DOCKER       container engine client (default: Debian's /usr/bin/docker when present,
#                since another docker earlier on PATH may insist on the buildx plugin)
#   BASE_IMAGE   base of both stages (default: the Dockerfile's ARG BASE_IMAGE, an exact
#                Debian point-release tag; when it can be pulled it is pinned by digest,
#                the digest of its multi-platform list, which serves every platform)
#   PIP_CERT     a CA bundle pip needs to reach the package index; passed as a BuildKit
#                secret, never stored in the image
#   BOOTSTRAP_BASE=1  when BASE_IMAGE is neither present nor pullable (no registry
#                reachable), make it for each platform from Debian's packages with
#                debootstrap (root only), tagged BASE_IMAGE-ARCH (and plain BASE_IMAGE for
#                this machine's architecture); BOOTSTRAP_SUITE picks the Debian release
#                (default bookworm)
#   DIST_DIR     where to write each platform's CycloneDX SBOM of the image's Python
#                packages, as <IMAGE-ARCH, ':' and '/' as '_'>.cdx.json (default dist);
#                SBOM=0 skips them
#   IMAGE_TEST_DEPS=1  also write, for each platform, the test suite's pytest and
#                hypothesis built for it (the Dockerfile's test-deps stage), to
#                DIST_DIR/<IMAGE-ARCH, as above>.test-deps, for tests/deploy/
#                test_image_suite.py (scripts/ci-image.sh sets it)
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' gfd/__init__.py)
image=${1:-gfd:${version}}
# IMAGE-ARCH must stay a tag of the same repository: give a bare name the tag "latest".
[[ ${image##*/} == *:* ]] || image=$image:latest
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

# Docker's and Debian's names of an architecture are the same for the two gfd builds.
host_arch=$("$DOCKER" version --format '{{.Server.Arch}}')
architectures=()
IFS=, read -r -a platforms <<<"${PLATFORMS:-linux/amd64,linux/arm64}"
for platform in "${platforms[@]}"; do
    case $platform in
        linux/amd64 | linux/arm64) architectures+=("${platform#linux/}") ;;
        *)
            echo "build-image: platform '$platform' is not built; PLATFORMS takes linux/amd64 and linux/arm64" >&2
            exit 2
            ;;
    esac
done

# A foreign architecture's RUN steps need qemu through binfmt; say so before a long build
# fails on "exec format error".
binfmt=/proc/sys/fs/binfmt_misc
for arch in "${architectures[@]}"; do
    [[ $arch != "$host_arch" ]] || continue
    qemu=qemu-aarch64
    [[ $arch == arm64 ]] || qemu=qemu-x86_64
    if ! grep -qx enabled "$binfmt/$qemu" 2>/dev/null; then
        echo "build-image: linux/$arch cannot be built here: no enabled $qemu binfmt entry in $binfmt;" \
            "install qemu-user-static and binfmt-support (scripts/ci-image.sh does), or build" \
            "this machine's only: PLATFORMS=linux/$host_arch" >&2
        exit 2
    fi
done

if [[ ${INDEX:-1} != 0 ]]; then
    BUILDAH=${BUILDAH:-$(command -v buildah || true)}
    if [[ -z $BUILDAH ]]; then
        echo "build-image: buildah, which makes the image index, is not installed;" \
            "install it (Debian: apt-get install buildah) or set INDEX=0 for the per-architecture images only" >&2
        exit 2
    fi
fi

image_arch() {
    # The architecture an image is for, or nothing when the engine has no such image.
    "$DOCKER" image inspect --format '{{.Architecture}}' "$1" 2>/dev/null || true
}

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
    # Make the base for one architecture from Debian's packages, tagged "$base-$arch".
    local arch=$1 suite=${BOOTSTRAP_SUITE:-bookworm}
    command -v debootstrap >/dev/null || {
        echo "build-image: $base is missing and debootstrap is not installed (apt-get install debootstrap)" >&2
        exit 2
    }
    local work mirror started=$SECONDS
    mirror=$(debian_mirror)
    work=$(mktemp -d)
    # Cleared as it runs: a RETURN trap would otherwise fire again for every later return.
    trap 'rm -rf "$work"; trap - RETURN' RETURN
    echo "build-image: making $base-$arch from Debian $suite $arch packages ($mirror)"
    # A foreign architecture's package scripts run under qemu-user-static through binfmt.
    debootstrap --arch="$arch" --variant=minbase "$suite" "$work/rootfs" "$mirror" >/dev/null
    # apt inside the image must not keep the build host's package lists, nor the
    # packages debootstrap downloaded (115 MB that every layer above would carry).
    rm -rf "$work"/rootfs/var/lib/apt/lists/* "$work"/rootfs/var/cache/apt/*.bin \
        "$work"/rootfs/var/cache/apt/archives/*.deb
    # The tag names a point release (debian:12.15-slim): refuse to put that name on
    # another one, which is what the mirror serves once Debian has moved on.
    local wanted got
    wanted=$(sed -n 's/^debian:\([0-9][0-9.]*\)-slim$/\1/p' <<<"$base")
    got=$(cat "$work/rootfs/etc/debian_version")
    if [[ -n $wanted && $got != "$wanted" ]]; then
        echo "build-image: the mirror now serves Debian $got, not $wanted; update ARG BASE_IMAGE in the Dockerfile" >&2
        exit 2
    fi
    # Not `docker import --platform`: Docker 20.10 records the engine's own architecture
    # whatever that flag says, and BuildKit then refuses the base for the other platform.
    # A FROM scratch build with --platform records the one asked for. /dev, /proc and
    # /sys are the engine's to provide at run time.
    mkdir "$work/context"
    tar -C "$work/rootfs" --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
        -cf "$work/context/rootfs.tar" .
    printf 'FROM scratch\nADD rootfs.tar /\nCMD ["bash"]\n' >"$work/context/Dockerfile"
    DOCKER_BUILDKIT=1 "$DOCKER" build --quiet --platform "linux/$arch" --tag "$base-$arch" \
        "$work/context" >/dev/null
    if [[ $(image_arch "$base-$arch") != "$arch" ]]; then
        echo "build-image: $base-$arch was made, but the engine records it as $(image_arch "$base-$arch")" >&2
        exit 2
    fi
    echo "build-image: made $base-$arch in $((SECONDS - started)) s"
}

# The base each architecture builds on. From a registry: the tag pinned by the digest it
# was pulled by, which names the multi-platform list, so BuildKit fetches each platform's
# own image from it. Without a registry: a local image of that architecture, either
# BASE_IMAGE itself or BASE_IMAGE-ARCH (made by bootstrap_base). BuildKit ignores a local
# image of another architecture and tries the registry, so the tags must be per arch.
pinned=
if [[ $base != *@* ]]; then
    present=$(image_arch "$base")
    if [[ -z $present ]] && "$DOCKER" pull "$base" >/dev/null 2>&1; then
        present=$(image_arch "$base")
    fi
    if [[ -n $present ]]; then
        digest=$("$DOCKER" image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$base" | head -n 1)
        [[ $digest != *@sha256:* ]] || pinned="$base@${digest#*@}"
    fi
else
    pinned=$base
fi

base_for() {
    local arch=$1
    if [[ -n $pinned ]]; then
        echo "$pinned"
    elif [[ $(image_arch "$base") == "$arch" ]]; then
        echo "$base"
    elif [[ $(image_arch "$base-$arch") == "$arch" ]]; then
        echo "$base-$arch"
    elif [[ ${BOOTSTRAP_BASE:-0} == 1 ]]; then
        bootstrap_base "$arch" >&2
        # A plain `docker build .` on this machine finds the base by the Dockerfile's name.
        if [[ $arch == "$host_arch" && -z $(image_arch "$base") ]]; then
            "$DOCKER" tag "$base-$arch" "$base"
        fi
        echo "$base-$arch"
    else
        echo "build-image: no $arch base: $base is not present for $arch and cannot be pulled;" \
            "set BOOTSTRAP_BASE=1 to make it from Debian packages" >&2
        exit 2
    fi
}

secret_args=()
if [[ -n ${PIP_CERT:-} && -s $PIP_CERT ]]; then
    secret_args+=(--secret "id=pipcert,src=$PIP_CERT")
fi
if [[ -n ${DOCKER_BUILD_NETWORK:-} ]]; then
    secret_args+=(--network "$DOCKER_BUILD_NETWORK")
fi

# What BuildKit's local exporter writes (the SBOM, the test packages) lands here first.
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for arch in "${architectures[@]}"; do
    from=$(base_for "$arch")
    tags=(--tag "$image-$arch")
    [[ $arch != "$host_arch" ]] || tags+=(--tag "$image")
    started=$SECONDS
    echo "build-image: building $image-$arch (linux/$arch) on $from"
    DOCKER_BUILDKIT=1 "$DOCKER" build --platform "linux/$arch" --build-arg "BASE_IMAGE=$from" \
        "${secret_args[@]}" "${tags[@]}" .
    built=$(image_arch "$image-$arch")
    if [[ $built != "$arch" ]]; then
        echo "build-image: $image-$arch is recorded as '$built', not $arch" >&2
        exit 2
    fi
    echo "build-image: built $image-$arch in $((SECONDS - started)) s" \
        "($(( $("$DOCKER" image inspect --format '{{.Size}}' "$image-$arch") / 1000000 )) MB)"

    # The SBOM comes from the Dockerfile's sbom stage, which reuses this platform's cached
    # build stage: the tool describes the very /opt/gfd the image holds. BuildKit's local
    # exporter writes the stage's one file; the image itself is not changed by this build.
    if [[ ${SBOM:-1} != 0 ]]; then
        sbom=${DIST_DIR:-dist}/${image//[:\/]/_}-$arch.cdx.json
        DOCKER_BUILDKIT=1 "$DOCKER" build --platform "linux/$arch" --build-arg "BASE_IMAGE=$from" \
            "${secret_args[@]}" --target sbom --output "type=local,dest=$out" .
        mkdir -p "$(dirname "$sbom")"
        mv "$out/gfd.cdx.json" "$sbom"
        echo "build-image: SBOM of $image-$arch's Python packages (CycloneDX): $sbom"
    fi

    if [[ ${IMAGE_TEST_DEPS:-0} == 1 ]]; then
        deps=${DIST_DIR:-dist}/${image//[:\/]/_}-$arch.test-deps
        started=$SECONDS
        DOCKER_BUILDKIT=1 "$DOCKER" build --platform "linux/$arch" --build-arg "BASE_IMAGE=$from" \
            "${secret_args[@]}" --target test-deps --output "type=local,dest=$out" .
        rm -rf "$deps"
        mkdir -p "$(dirname "$deps")"
        mv "$out/test-deps" "$deps"
        echo "build-image: the test suite's packages for linux/$arch in $((SECONDS - started)) s: $deps"
    fi
done

# The image index: one reference for every platform built. buildah keeps the list in a
# storage of its own under the run's temporary folder (vfs: no mounts needed), takes each
# platform's image from the engine as built, and writes the index with its images' blobs as
# one OCI archive, tagged with IMAGE's tag.
if [[ ${INDEX:-1} != 0 ]]; then
    index=${DIST_DIR:-dist}/${image//[:\/]/_}.oci.tar
    storage=$out/buildah
    buildah_in() {
        TMPDIR=$storage "$BUILDAH" --root "$storage/root" --runroot "$storage/run" --storage-driver vfs "$@"
    }
    started=$SECONDS
    mkdir -p "$storage"
    buildah_in manifest create "$image" >/dev/null
    for arch in "${architectures[@]}"; do
        buildah_in manifest add --os linux --arch "$arch" "$image" "docker-daemon:$image-$arch" >/dev/null
    done
    mkdir -p "$(dirname "$index")"
    rm -f "$index.part"
    buildah_in manifest push --quiet --all --format oci "$image" "oci-archive:$index.part:${image##*:}"
    mv "$index.part" "$index"
    echo "build-image: image index of ${architectures[*]} as $image in $((SECONDS - started)) s:" \
        "$index ($(( $(stat -c %s "$index") / 1000000 )) MB); push it with" \
        "skopeo copy --all oci-archive:$index docker://REGISTRY/${image##*/}"
fi
