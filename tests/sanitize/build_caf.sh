#!/usr/bin/env bash
# Builds Debian's CAF core library (libcaf_core) from its own source package,
# instrumented with the given sanitizer flags, for the ThreadSanitizer run
# (tests/sanitize/run.sh tsan; docs/sanitizers.md says why).
#
#   bash tests/sanitize/build_caf.sh OUT_DIR JOBS FLAGS...
#
# Leaves OUT_DIR/lib/libcaf_core.so.VERSION (and the libcaf_core.so link), a
# drop-in for Debian's: same version, same headers (/usr/include/caf, which
# the package's source ships unchanged), same build_config.hpp, same soname,
# so Debian's libcaf_io loads it too. Only libcaf_core: our tests under TSan
# never load CAF's I/O module (the middleman). Done once per OUT_DIR and
# flags (a stamp file); the source comes from `apt-get source` with a
# temporary source list, the system's apt configuration stays untouched.
set -euo pipefail

out=${1:?usage: build_caf.sh OUT_DIR JOBS FLAGS...}
jobs=${2:?usage: build_caf.sh OUT_DIR JOBS FLAGS...}
shift 2
flags="$*"

version=$(dpkg-query -W -f='${Version}' libcaf-dev)  # e.g. 0.17.6-2.1+b1
upstream=${version%%-*}                                 # 0.17.6
soname="libcaf_core.so.$upstream"
mkdir -p "$out/apt/lists/partial" "$out/src" "$out/obj" "$out/lib"
out=$(cd "$out" && pwd)
stamp="$out/lib/stamp"
if [[ -f "$out/lib/$soname" && "$(cat "$stamp" 2>/dev/null)" == "$version $flags" ]]; then
  exit 0
fi

# -------------------------------------------------------------- the source
source_dir="$out/src/actor-framework-$upstream"
if [[ ! -d "$source_dir/libcaf_core/src" ]]; then
  codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
  # The source index of the archive this machine already installs from: the
  # first non-security URI of its apt sources (deb822 or one-line style).
  archive=$( (grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}'
              grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}') |
             grep -v -- '-security' | grep -m 1 -i debian || true)
  if [[ -z "$archive" ]]; then
    echo "build_caf.sh: no Debian archive in this machine's apt sources" >&2
    exit 1
  fi
  echo "deb-src $archive $codename main" >"$out/apt/sources.list"
  apt_options=(-q -o Dir::Etc::SourceList="$out/apt/sources.list" -o Dir::Etc::SourceParts=-
               -o Dir::State::Lists="$out/apt/lists")
  apt-get "${apt_options[@]}" update >"$out/apt/update.log" 2>&1 ||
    { cat "$out/apt/update.log"; exit 1; }
  # Only the upstream tarball is needed (the package's patches are build
  # system ones; its headers are the installed ones). A missing Debian
  # tarball on the mirror is not fatal then.
  (cd "$out/src" && apt-get "${apt_options[@]}" source --download-only "actor-framework=${version%+b*}" \
    >"$out/apt/source.log" 2>&1) || true
  orig=$(ls "$out"/src/actor-framework_"$upstream".orig.tar.* 2>/dev/null | head -n 1)
  if [[ -z "$orig" ]]; then
    cat "$out/apt/source.log"
    echo "build_caf.sh: could not fetch the source of actor-framework $version" >&2
    exit 1
  fi
  tar -xf "$orig" -C "$out/src"
fi

# --------------------------------------------------------------- the build
# The installed build_config.hpp: the same configuration as Debian's library.
mkdir -p "$out/include/caf/detail"
cp /usr/include/caf/detail/build_config.hpp "$out/include/caf/detail/"
rm -f "$out/obj"/*.o
cd "$source_dir/libcaf_core"
echo "build_caf.sh: compiling libcaf_core $upstream with $flags ($jobs jobs)"
find src -name '*.cpp' | sort |
  CXXFLAGS="$flags" OBJ="$out/obj" INC="$out/include" xargs -P "$jobs" -I{} sh -c \
    'g++ -std=c++17 -w -fPIC $CXXFLAGS -DLIBCAF_CORE_EXPORTS -I"$INC" -I. -c "{}" -o "$OBJ/$(echo "{}" | tr / _).o"'
g++ -shared -fPIC $flags -Wl,-soname,"$soname" -o "$out/lib/$soname" "$out"/obj/*.o -lpthread
ln -sf "$soname" "$out/lib/libcaf_core.so"
echo "$version $flags" >"$stamp"
