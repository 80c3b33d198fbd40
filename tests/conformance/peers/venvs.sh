#!/bin/sh
# venvs.sh: the peers' venvs, made from PyPI when absent (make peers-venvs):
# AIPerf 0.13.0 in $AIPERF_VENV, GuideLLM 0.8.1 in $GUIDELLM_VENV, vLLM
# 0.33.0 in $VLLM_VENV (defaults under build/; vLLM installs without a GPU
# in about 2 minutes and takes about 9.4 GB; its `bench serve` client needs
# no GPU). An existing venv with the tool's entry point is kept as it is.
set -u
make_venv() {
    dir=$1 pkg=$2 bin=$3
    if [ -x "$dir/bin/$bin" ]; then
        echo "$dir: $("$dir/bin/pip" show "${pkg%%==*}" 2>/dev/null | awk '/^Version/ {print $2}')"
        return 0
    fi
    echo "$dir: installing $pkg"
    python3 -m venv "$dir" && "$dir/bin/pip" install -q --upgrade pip && "$dir/bin/pip" install -q "$pkg"
}
status=0
make_venv "${AIPERF_VENV:-build/aiperf}" aiperf==0.13.0 aiperf || status=1
make_venv "${GUIDELLM_VENV:-build/guidellm}" guidellm==0.8.1 guidellm || status=1
make_venv "${VLLM_VENV:-build/vllm}" vllm==0.33.0 vllm || status=1
exit $status
