# gfd container image.
#
# Stage "build" compiles gfd's wheel (two C extensions, against nvml.h from the
# nvidia-nvml-dev build requirement) and installs it with its runtime extras into a
# virtual environment at /opt/gfd that has no pip or setuptools of its own, then removes
# from it what the agent never loads (see docs/container.md, "Size"). Stage "rootfs" is
# the same Debian base with only the Python interpreter added and apt's caches, the
# package manager and documentation removed. The final image is that root filesystem
# and /opt/gfd, nothing else: no compiler, no headers, no pip, no apt. NVIDIA's NVML is
# not in the image: the NVIDIA container runtime mounts the node's libnvidia-ml.so.1
# into the container (see docs/container.md).
#
# Build: scripts/build-image.sh (or: docker build -t gfd:TAG .). Where pip needs a
# private CA bundle, pass it as a BuildKit secret, never as a file in the image:
#   DOCKER_BUILDKIT=1 docker build --secret id=pipcert,src="$PIP_CERT" -t gfd:TAG .

# The base is pinned to an exact Debian point release. A digest would pin it better, but
# this Dockerfile must also build where no registry can be reached and the base is
# made from Debian's packages (scripts/build-image.sh BOOTSTRAP_BASE=1): such an image
# has no registry digest to name. So the default is the exact tag, and
# scripts/build-image.sh, wherever it can pull the tag, resolves it and passes
# BASE_IMAGE=<tag>@sha256:<digest>, which the image records in its base.name label.
ARG BASE_IMAGE=debian:12.15-slim

FROM ${BASE_IMAGE} AS build

ENV DEBIAN_FRONTEND=noninteractive \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore

# Versions come from the pinned Debian release of the base image.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        ca-certificates gcc libc6-dev python3 python3-dev python3-venv \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . /src

# The secret is optional: the same Dockerfile builds where no CA bundle is needed.
# Every file from the package index is checked against requirements/*.lock
# (--require-hashes; make lock regenerates them): the build requirements first, then
# gfd's wheel is built without build isolation (nothing more is fetched), then the
# runtime dependencies and that wheel go into /opt/gfd.
# Unused by the agent, and so removed from /opt/gfd after the hash-checked install:
# the kubernetes client's asyncio tree (kubernetes/aio, 68 MB) and the packages only it
# needs (aiohttp and its helpers); gfd imports kubernetes.client and kubernetes.config,
# never kubernetes.aio (the synchronous client does need pydantic: it stays). The client's generated sources are 90 %
# docstrings: they are compiled without them (-OO) into sourceless .pyc files, which any
# interpreter loads, and the .py files are dropped (57 MB -> 17 MB). gfd's own code
# keeps its sources. tests/deploy/test_image_runtime.py imports in the image every module
# each sink path loads, so a trim that breaks one fails there.
ARG UNUSED_PACKAGES="aiohttp aiohttp-retry aiohappyeyeballs aiosignal frozenlist multidict \
yarl propcache"

# The secret is optional: the same Dockerfile builds where no CA bundle is needed.
# Every file from the package index is checked against requirements/*.lock
# (--require-hashes; make lock regenerates them): the build requirements first, then
# gfd's wheel is built without build isolation (nothing more is fetched), then the
# runtime dependencies and that wheel go into /opt/gfd.
# hadolint ignore=SC2086
RUN --mount=type=secret,id=pipcert \
    if [ -s /run/secrets/pipcert ]; then export PIP_CERT=/run/secrets/pipcert; fi \
    && python3 -m venv /opt/build-venv \
    && /opt/build-venv/bin/pip install --require-hashes --no-deps -r requirements/build.lock \
    && /opt/build-venv/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /wheels . \
    && python3 -m venv --without-pip /opt/gfd \
    && /opt/build-venv/bin/pip --python /opt/gfd/bin/python install --require-hashes \
        --no-deps -r requirements/image.lock \
    && /opt/build-venv/bin/pip --python /opt/gfd/bin/python install --no-deps --no-index \
        /wheels/gfd-*.whl \
    && /opt/build-venv/bin/pip --python /opt/gfd/bin/python uninstall -y $UNUSED_PACKAGES \
    && site=$(/opt/gfd/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))') \
    && rm -rf "$site/kubernetes/aio" /opt/gfd/bin/Activate.ps1 \
    && find "$site/kubernetes" -name '*_test.py' -delete \
    && find "$site/kubernetes" -name __pycache__ -prune -exec rm -rf {} + \
    && /opt/gfd/bin/python -OO -m compileall -q -b "$site/kubernetes" \
    && find "$site/kubernetes" -name '*.py' -delete \
    && /opt/gfd/bin/python -I -c "import gfd.topology._builder, gfd.sim, gfd.metrics, gfd.sinks.kube, kubernetes.client, kubernetes.config, prometheus_client"

# The runtime's root filesystem: the base and Debian's python3, without what only
# installing packages needs. apt with its caches and perl-base (only package scripts
# run it) are purged: the image is rebuilt, never upgraded in place; apt's package
# cache alone was 80 MB. Documentation, manual pages and translations go, as in
# Debian's own slim images (the copyright files stay), and so do glibc's iconv modules
# (gconv, 8 MB: Python's codecs are its own). dpkg's database stays, so image scanners
# still see the installed packages.
FROM ${BASE_IMAGE} AS rootfs

# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && groupadd --gid 65532 gfd \
    && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin gfd \
    && apt-get clean \
    && dpkg --purge --force-remove-essential --force-depends apt perl-base \
    && rm -rf /var/lib/apt /var/cache/apt /var/cache/debconf/*-old /var/log/* \
        /usr/share/man/* /usr/share/info/* /usr/share/locale/* /etc/apt \
        /usr/lib/*-linux-gnu/gconv \
    && find /usr/share/doc -type f ! -name copyright -delete \
    && find /usr/share/doc -type l -delete \
    && ln -s /opt/gfd/bin/gfd /usr/bin/gfd \
    && ln -s /opt/gfd/bin/gpu-feature-discovery /usr/bin/gpu-feature-discovery

# Two layers: the operating system with Python (rootfs), and gfd with its packages.
# Copying rootfs whole (DL3067) is the point: a layer on top of the base could only add
# bytes, never remove the base's caches and apt.
FROM scratch

ARG BASE_IMAGE
LABEL org.opencontainers.image.base.name="${BASE_IMAGE}" \
      org.opencontainers.image.title="gfd" \
      org.opencontainers.image.description="GPU feature discovery for Kubernetes: NVML facts, GFD-compatible node labels, GPU topology" \
      org.opencontainers.image.licenses="Apache-2.0"

# hadolint ignore=DL3067
COPY --from=rootfs / /
COPY --from=build /opt/gfd /opt/gfd

# /usr/bin/gfd and /usr/bin/gpu-feature-discovery (made in rootfs) point into /opt/gfd:
# the latter is the reference's command path, so manifests and GPU operators that run
# /usr/bin/gpu-feature-discovery work unchanged. Started by that name, gfd sets its
# process title to it, so NVIDIA's config-manager can find and signal it
# (docs/gpu-operator.md).

# NVIDIA_*: ask the NVIDIA container runtime for every GPU and only the "utility"
# driver capability (NVML and nvidia-smi; no CUDA). PYTHONDONTWRITEBYTECODE: the
# root filesystem is read-only in the pod; the bytecode was compiled at install.
# PATH: a scratch image inherits no environment from the base.
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# Metrics, /healthz and /readyz (--metrics-address).
EXPOSE 8079

USER 65532:65532
ENTRYPOINT ["gfd"]
