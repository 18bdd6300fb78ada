#!/usr/bin/env bash
# Local stand-ins for the images the stack is built on, for a Docker engine that reaches no
# image registry. For each image named by the Dockerfiles and docker-compose.yml: present
# already, or pulled, or else built from Debian 12's packages (stand-ins/*.Dockerfile) and
# tagged with the name the stack uses. Each stand-in is labelled, and said so every run.
# Needs DOCKER_HOST (or the default socket) and root for debootstrap.
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=scripts/stack/stand-ins
LABEL=org.shunter.stand-in
BASE=shunter-stand-in/debian:12

# the base images of the default profile: the ARGs of the two Dockerfiles it builds and
# the images of the services that build nothing (the GPU profile's CUDA base is not here)
images() {
  sed -n 's/^ARG [A-Z_]*_IMAGE=//p' Dockerfile deploy/otel/Dockerfile
  .venv/bin/python - <<'EOF'
import yaml

services = yaml.safe_load(open("docker-compose.yml"))["services"]
for service in services.values():
    if "build" not in service and "profiles" not in service:
        print(service["image"])
EOF
}

# the stand-in Dockerfile for an image name: the one whose second line names its repository
recipe() {
  local found
  found=$(grep -lx "# stand-in for: ${1%:*}" "$HERE"/*.Dockerfile | head -1)
  [ -n "$found" ] && basename "$found" .Dockerfile
}

debian_base() {
  docker image inspect "$BASE" >/dev/null 2>&1 && return
  command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
  local root
  root=$(mktemp -d /var/tmp/shunter-rootfs.XXXXXX)
  echo "stand-ins: debootstrap of Debian 12 (bookworm, minbase) into $root"
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$root.log" 2>&1 ||
    { tail -20 "$root.log"; exit 1; }
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | docker import --change "LABEL $LABEL=debootstrap" - "$BASE" >/dev/null
  rm -rf "$root" "$root.log"
}

for image in $(images | sort -u); do
  made=$(docker image inspect --format "{{ index .Config.Labels \"$LABEL\" }}" "$image" 2>/dev/null) ||
    made=missing
  if [ "$made" = missing ] && timeout 60 docker pull -q "$image" >/dev/null 2>&1; then
    made=""
  fi
  if [ "$made" = missing ]; then
    name=$(recipe "$image") || { echo "stand-ins: no registry, and no stand-in for $image" >&2; exit 1; }
    debian_base
    echo "stand-ins: no registry answered for $image; building it from Debian 12 ($HERE/$name.Dockerfile)"
    context=$(mktemp -d)
    cp "$HERE"/* "$context"/
    cp /etc/ssl/certs/ca-certificates.crt "$context/host-ca-certificates.crt"
    docker build --label "$LABEL=$name" -t "$image" -f "$context/$name.Dockerfile" "$context" \
      >"$context.log" 2>&1 || { tail -20 "$context.log"; exit 1; }
    rm -rf "$context" "$context.log"
    made=$name
  fi
  if [ -n "$made" ]; then
    echo "stand-in  $image  <- $(sed -n '1s/^# //p' "$HERE/$made.Dockerfile")"
  else
    echo "image     $image"
  fi
done
