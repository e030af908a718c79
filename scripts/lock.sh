#!/usr/bin/env bash
# Regenerate the lock files (make lock): every dependency of the image and of CI,
# pinned, with the sha256 of every file PyPI serves for that version.
#
#   requirements/image.lock  what the image's /opt/gfd runs with (gfd[kubernetes,metrics])
#   requirements/build.lock  what building gfd's wheel needs (requirements/build.in)
#   requirements/ci.lock     make test and make lint: the test, lint and lock extras, the
#                            build requirements (the editable install builds without
#                            isolation) and pip itself
#
# uv resolves for the image's interpreter (Python 3.11) on every platform (--universal)
# whatever machine runs this. Environment: UV (default .venv/bin/uv); SSL_CERT_FILE
# when the index is reached through a TLS-inspecting proxy (defaults to PIP_CERT).
set -euo pipefail
cd "$(dirname "$0")/.."

uv=${UV:-.venv/bin/uv}
if [[ ! -x $uv ]]; then
    echo "lock: $uv not found; run make test first (it installs uv from requirements/ci.lock)" >&2
    exit 2
fi
if [[ -n ${PIP_CERT:-} && -z ${SSL_CERT_FILE:-} ]]; then
    export SSL_CERT_FILE=$PIP_CERT
fi

compile() {
    local output=$1
    shift
    "$uv" pip compile --quiet --generate-hashes --universal --python-version 3.11 \
        --custom-compile-command "make lock" --output-file "$output" "$@"
}

compile requirements/image.lock pyproject.toml --extra kubernetes --extra metrics
compile requirements/build.lock requirements/build.in
compile requirements/ci.lock pyproject.toml --extra test --extra lint --extra lock \
    requirements/build.in requirements/tools.in
echo "lock: requirements/image.lock, build.lock and ci.lock regenerated"
