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
    && /opt/gfd/bin/python -I -c "import gfd.topology._builder, gfd.sim, gfd.metrics, gfd.kube_api, kubernetes.client, kubernetes.config, prometheus_client"

# SBOM of /opt/gfd exactly as the image ships it (after the removals above), in
# CycloneDX, by cyclonedx-bom's "environment" mode, which asks that environment's own
# interpreter for its distributions. The tool runs here, beside the environment it
# describes, so the SBOM needs no copy of the image's files and nothing on the build
# machine. Only scripts/build-image.sh builds this stage (--target sbom); the image does
# not depend on it and carries neither the tool nor the file. The tool's wheels are
# pinned by sha256 (pip --require-hashes, no dependency resolution): what its
# "environment" command imports and no more (JSON schema validation would add binary
# wheels per architecture), and chardet's pure-Python wheel, the one hash given, so
# the same pins serve amd64 and arm64. To move to a newer cyclonedx-bom, pip download
# it with its dependencies and take the sha256 of each of these files.
FROM build AS sbom-tool

RUN --mount=type=secret,id=pipcert \
    if [ -s /run/secrets/pipcert ]; then export PIP_CERT=/run/secrets/pipcert; fi \
    && printf '%s\n' \
        "cyclonedx-bom==7.5.0 --hash=sha256:a3020e225107214a66cb9c79ae83e3a71640a06d4ff3a0e2f9cb0d238f7061fd" \
        "cyclonedx-python-lib==11.12.0 --hash=sha256:0e807521a921a5c3cb8ce1153f8a61d29eedfe76a46aac2796b7c6b573391a54" \
        "packageurl-python==0.17.6 --hash=sha256:31a85c2717bc41dd818f3c62908685ff9eebcb68588213745b14a6ee9e7df7c9" \
        "py-serializable==2.2.0 --hash=sha256:2cce775abc5aac12115f9ff572a145c7276d04a770090334bd4e51ed9c782415" \
        "defusedxml==0.7.1 --hash=sha256:a352e7e428770286cc899e2542b6cdaedb2b4953ff269a210103ec58f6198a61" \
        "sortedcontainers==2.4.0 --hash=sha256:a163dcaede0f1c021485e957a39245190e74249897e2ae4b2aa38595db237ee0" \
        "license-expression==30.4.4 --hash=sha256:421788fdcadb41f049d2dc934ce666626265aeccefddd25e162a26f23bcbf8a4" \
        "boolean-py==5.0 --hash=sha256:ef28a70bd43115208441b53a045d1549e2f0ec6e3d08a9d142cbc41c1938e8d9" \
        "packaging==26.4 --hash=sha256:81383611a09c1bc0b08b76e0fd5829d7c6824c65b27a6aee339da133f4233ea2" \
        "typing-extensions==4.16.0 --hash=sha256:481caa481374e813c1b176ada14e97f1f67a4539ce9cfeb3f350d78d6370c2e8" \
        "pip-requirements-parser==32.0.1 --hash=sha256:4659bc2a667783e7a15d190f6fccf8b2486685b6dba4c19c3876314769c57526" \
        "pyparsing==3.3.3 --hash=sha256:ece8c00a69cf01b45d0b1dedabb469c90d8caf996d4fda40f147627a122849a4" \
        "chardet==7.7.0 --hash=sha256:11cf9b719ea3675a2a7d8a3071bbe4d7ea24b26bfe39a51588d515ddd05cacad" \
        >/tmp/sbom-tool.txt \
    && python3 -m venv --without-pip /opt/sbom-tool \
    && /opt/build-venv/bin/pip --python /opt/sbom-tool/bin/python install --require-hashes \
        --no-deps --only-binary :all: -r /tmp/sbom-tool.txt \
    && /opt/sbom-tool/bin/cyclonedx-py environment --no-validate --output-reproducible \
        --pyproject /src/pyproject.toml --mc-type application \
        --output-file /gfd.cdx.json /opt/gfd/bin/python

# Only the file, so that `docker build --target sbom --output type=local,dest=DIR`
# writes it alone into DIR.
FROM scratch AS sbom
COPY --from=sbom-tool /gfd.cdx.json /gfd.cdx.json

# What running part of gfd's test suite inside the image needs (tests/deploy/
# test_image_suite.py runs tests/sim and tests/topology in each architecture's image, the
# arm64 one under emulation): pytest and hypothesis with their dependencies, at the
# versions and sha256 hashes requirements/ci.lock pins for the suite, installed for this
# stage's platform (hypothesis has a compiled part, so a copy from the build machine
# would not load on arm64). Only scripts/build-image.sh builds it (IMAGE_TEST_DEPS=1,
# --target test-deps); the image holds none of it.
FROM build AS test-deps-tool

ARG TEST_PACKAGES="pytest pluggy iniconfig packaging pygments hypothesis sortedcontainers"

# The lock's entry of each package (its "name==version \" line and the hash lines
# below it), nothing else of the lock.
RUN --mount=type=secret,id=pipcert \
    if [ -s /run/secrets/pipcert ]; then export PIP_CERT=/run/secrets/pipcert; fi \
    && awk -v wanted=" $TEST_PACKAGES " \
        '/^[A-Za-z0-9]/ { name = tolower($1); sub(/==.*/, "", name); keep = index(wanted, " " name " ") > 0 } keep' \
        requirements/ci.lock >/tmp/test-deps.txt \
    && /opt/build-venv/bin/pip install --require-hashes --no-deps --only-binary :all: \
        --target /opt/test-deps -r /tmp/test-deps.txt

# Only the packages, so that `docker build --target test-deps --output type=local,dest=DIR`
# writes them alone into DIR.
FROM scratch AS test-deps
COPY --from=test-deps-tool /opt/test-deps /test-deps

# The runtime's root filesystem: the base and Debian's python3, without what only
# installing packages needs. apt with its caches and perl-base (only package scripts
# run it) are purged, with the libraries only apt used (TLS, keyring, gpgv, C++
# runtime): the image is rebuilt, never upgraded in place; apt's package cache alone was
# 80 MB, and the libraries 13 MB more (they kept the arm64 image over 150 MB).
# Documentation, manual pages and translations go, as in Debian's own slim images (the
# copyright files stay), and so do glibc's iconv modules (gconv, 8 MB: Python's codecs are
# its own). dpkg's database stays, so image scanners still see the installed packages.
FROM ${BASE_IMAGE} AS rootfs

# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && groupadd --gid 65532 gfd \
    && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin gfd \
    && apt-get clean \
    && dpkg --purge --force-remove-essential --force-depends apt perl-base \
        gpgv libapt-pkg6.0 libgnutls30 libstdc++6 libunistring2 libp11-kit0 libtasn1-6 \
        libnettle8 libhogweed6 libidn2-0 libseccomp2 libxxhash0 debian-archive-keyring \
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
