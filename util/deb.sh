#!/bin/bash
# Builds the Debian package (make deb): libnginx-mod-http-idem_<version>_
# <arch>.deb in build/deb/. dpkg-buildpackage writes next to the source
# tree it builds, so it builds a copy of this tree in build/deb/ and the
# tree itself stays clean. The build dependencies of debian/control are
# installed first when they are missing (apt-get build-dep).
set -e
cd "$(dirname "$0")/.."
root=$PWD
out=$root/build/deb

if [ "$(id -u)" != 0 ]; then
    sudo=sudo
fi

pkg=$(sed -n 's/^Source: *//p' debian/control)
version=$(sed -n '1s/^[^(]*(\([^)]*\)).*/\1/p' debian/changelog)
src=$out/$pkg-$version

echo "make deb: $pkg $version"
rm -rf "$out"
mkdir -p "$src"
tar -c --exclude=./.git --exclude=./build --exclude='./build-*' \
    --exclude='./t/servroot*' --exclude=./t/tmp --exclude=./run -f - . \
    | tar -x -C "$src"

build_deps_ok() {
    command -v dpkg-checkbuilddeps >/dev/null \
        && (cd "$src" && dpkg-checkbuilddeps 2>/dev/null)
}

if ! build_deps_ok; then
    echo "installing the build dependencies of debian/control"
    export DEBIAN_FRONTEND=noninteractive
    # a policy-rc.d of our own keeps nginx (nginx-dev depends on it) from
    # starting on port 80; one that is already there is left alone
    policy=
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        $sudo sh -c 'printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d \
                     && chmod +x /usr/sbin/policy-rc.d'
        policy=yes
    fi
    status=0
    $sudo apt-get update -qq \
        && $sudo apt-get -o DPkg::Lock::Timeout=300 build-dep -y -qq \
               --no-install-recommends "$src" || status=$?
    [ -n "$policy" ] && $sudo rm -f /usr/sbin/policy-rc.d
    [ $status = 0 ] || exit $status
fi

arch=$(dpkg --print-architecture)
deb=$out/${pkg}_${version}_$arch.deb

(cd "$src" && dpkg-buildpackage -b -us -uc) > "$out/build.log" 2>&1 \
    || { tail -40 "$out/build.log"; echo "make deb: failed," \
         "see build/deb/build.log"; exit 1; }

test -f "$deb"
echo "built: ${deb#"$root"/}"
