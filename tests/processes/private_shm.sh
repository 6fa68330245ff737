#!/bin/sh
# Runs a program in a mount namespace of its own with an empty /dev/shm: mpirun's processes on one
# node that do not share /dev/shm (as in containers), which Open MPI still calls one node. Fails
# if the program leaves anything of meshvk's in that /dev/shm. Needs root (unshare, mount).
# MESHVK_PRIVATE_SHM_SIZE sizes it (tmpfs's size=, 512m by default).
#   private_shm.sh PROGRAM [ARGS...]
exec unshare --mount --propagation private sh -c '
  mount -t tmpfs -o "size=${MESHVK_PRIVATE_SHM_SIZE:-512m}" meshvk-private-shm /dev/shm || exit 97
  "$@"
  rc=$?
  left=$(ls /dev/shm | grep "^meshvk-")
  if [ -n "$left" ]; then
    echo "private_shm.sh: left in /dev/shm: $left" >&2
    exit 98
  fi
  exit $rc' private_shm "$@"
