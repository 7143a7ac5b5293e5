#!/bin/sh
# Executes one notebook headless with Debian's Jupyter (what the notebook ctests run):
#   notebooks/run_notebook.sh NOTEBOOK.ipynb OUT_DIR
# The executed copy and the figures go to OUT_DIR (set PIPESCOPE_BIN to choose the binary). Exits 77 (ctest:
# skipped) when /usr/bin/jupyter is not installed; .ci/install-deps installs it.
set -eu
JUPYTER=${JUPYTER:-/usr/bin/jupyter}
if [ ! -x "$JUPYTER" ]; then
  echo "skipped: $JUPYTER not found (install jupyter-nbconvert python3-ipykernel python3-pandas python3-matplotlib)"
  exit 77
fi
mkdir -p "$2"
# Debian's kernel (/usr/bin/python3) with Debian's packages: no user site-packages, no user kernels or IPython
# profile, no bytecode in the source tree.
export PIPESCOPE_NB_OUT="${PIPESCOPE_NB_OUT:-$2}" PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1 \
  JUPYTER_DATA_DIR="$2/.jupyter-data" IPYTHONDIR="$2/.ipython" PYDEVD_DISABLE_FILE_VALIDATION=1
exec "$JUPYTER" nbconvert --to notebook --execute --ExecutePreprocessor.timeout=600 \
  --ExecutePreprocessor.kernel_name=python3 --output-dir "$2" "$1"
