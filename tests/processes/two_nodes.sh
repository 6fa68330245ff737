#!/bin/sh
# mpirun over two simulated hosts on this machine: two network namespaces joined by a veth pair,
# each node in mount, UTS and pid namespaces of its own (its own /dev/shm, /tmp, hostname and
# /proc), the second node's daemon started through an rsh-style agent over the veth, as mpirun
# starts one over ssh. Addresses exist only inside the namespaces; everything is torn down at
# exit, whatever happens. Needs root, iproute2 and util-linux.
#   two_nodes.sh [mpirun arguments...]     (one slot per node: -np 2)
#   two_nodes.sh --probe                   (exit 0 where the namespaces can be made, else 77)
#   two_nodes.sh --if-possible COMMAND...  (COMMAND's status where they can, else 77: a test's skip)
# MESHVK_TWO_NODES_DELAY_MS=D delays every packet D ms each way (netem, where the kernel has it).
# A lost link: MESHVK_TWO_NODES_LINK_DOWN_AT=TEXT takes the link down when the job first prints a
# line starting with TEXT, then waits until no process named MESHVK_TWO_NODES_PROGRAM is left on
# either node (each must end by itself, within MESHVK_TWO_NODES_BOUND seconds, 60 by default),
# says how long that took and ends mpirun and its daemon, which Open MPI leaves hanging without
# the link (as an outer timeout would); exit status 1 then, 2 if a process outlived the bound.
# Exit status otherwise: mpirun's, or 124 when the job outlives MESHVK_TWO_NODES_TIMEOUT seconds
# (180 by default: under the tests' own limits, so the teardown always runs); 77 when this
# machine forbids the namespaces or the paths are hidden inside a node (under /tmp or /dev/shm).
set -u
if [ "${1:-}" = --if-possible ]; then
  shift
  "$0" --probe || exit $?
  exec "$@"
fi
if [ "$(id -u)" != 0 ]; then
  echo "two_nodes.sh: needs root (network namespaces, mounts); skipped" >&2
  exit 77
fi
for tool in ip unshare timeout; do
  if ! command -v "$tool" > /dev/null; then
    echo "two_nodes.sh: no $tool here (iproute2, util-linux, coreutils); skipped" >&2
    exit 77
  fi
done
case "$(cd "${MESHVK_TWO_NODES_DIR:-$PWD}" && pwd -P)" in
  /tmp | /tmp/* | /dev/shm | /dev/shm/*)
    echo "two_nodes.sh: ${MESHVK_TWO_NODES_DIR:-$PWD} is under /tmp or /dev/shm, which each node" \
      "replaces with its own; run it from elsewhere (the build directory); skipped" >&2
    exit 77
    ;;
esac
timeout_s=${MESHVK_TWO_NODES_TIMEOUT:-180}
bound=${MESHVK_TWO_NODES_BOUND:-60}
case "$timeout_s$bound" in
  *[!0-9]*)
    echo "two_nodes.sh: MESHVK_TWO_NODES_TIMEOUT and MESHVK_TWO_NODES_BOUND are whole seconds" >&2
    exit 2
    ;;
esac
# A killed run (SIGKILL runs no trap) leaves its namespaces: remove those whose script is gone.
for stale in $(ip netns list 2> /dev/null | sed -n 's/^\(meshvk-[ab]-[0-9][0-9]*\).*/\1/p'); do
  kill -0 "${stale##*-}" 2> /dev/null || ip netns del "$stale" 2> /dev/null
done
id=$$
subnet=10.254.$((id % 250))
ns_a=meshvk-a-$id
ns_b=meshvk-b-$id
veth_a=mvka$id
veth_b=mvkb$id
dir=$(mktemp -d "$(cd "${MESHVK_TWO_NODES_DIR:-$PWD}" && pwd -P)/two-nodes.XXXXXX") || exit 1

job=""
veth_made=""
made=""  # what this run made, so that cleanup removes nothing of another's
cleanup() {
  [ -n "$job" ] && kill "$job" 2> /dev/null
  for ns in $made; do
    pids=$(ip netns pids "$ns" 2> /dev/null)
    # shellcheck disable=SC2086  # one pid per word
    [ -n "$pids" ] && kill -9 $pids 2> /dev/null
    ip netns del "$ns" 2> /dev/null
  done
  [ -n "$veth_made" ] && ip link del "$veth_a" 2> /dev/null  # where it never reached a namespace
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 143' INT TERM

setup() {
  ip netns add "$ns_a" && made="$ns_a" && ip netns add "$ns_b" && made="$made $ns_b" &&
    ip link add "$veth_a" type veth peer name "$veth_b" && veth_made=1 &&
    ip link set "$veth_a" netns "$ns_a" && ip link set "$veth_b" netns "$ns_b" &&
    ip -n "$ns_a" addr add "$subnet.1/24" dev "$veth_a" &&
    ip -n "$ns_b" addr add "$subnet.2/24" dev "$veth_b" &&
    ip -n "$ns_a" link set lo up && ip -n "$ns_b" link set lo up &&
    ip -n "$ns_a" link set "$veth_a" up && ip -n "$ns_b" link set "$veth_b" up
}
if ! setup 2> "$dir/setup.log"; then
  echo "two_nodes.sh: this machine does not let us make network namespaces and a veth pair:" >&2
  cat "$dir/setup.log" >&2
  exit 77
fi
if [ -n "${MESHVK_TWO_NODES_DELAY_MS:-}" ]; then
  { tc -n "$ns_a" qdisc add dev "$veth_a" root netem delay "${MESHVK_TWO_NODES_DELAY_MS}ms" &&
      tc -n "$ns_b" qdisc add dev "$veth_b" root netem delay "${MESHVK_TWO_NODES_DELAY_MS}ms"; } 2> /dev/null ||
    echo "two_nodes.sh: no netem here; the link is not delayed" >&2
fi

# A node: its own hostname, /dev/shm, /tmp and /proc, in its network namespace.
node() {  # node NAMESPACE HOSTNAME COMMAND-STRING
  ip netns exec "$1" unshare --uts --mount --pid --fork --mount-proc --propagation private \
    sh -c "hostname $2 && mount -t tmpfs meshvk-shm /dev/shm && mount -t tmpfs meshvk-tmp /tmp && $3"
}

# The agent mpirun starts the second node's daemon with (as `ssh HOST COMMAND...`).
cat > "$dir/agent" << EOF
#!/bin/sh
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done  # ssh-style options
host=\$1
shift
[ "\$host" = "$subnet.2" ] || { echo "two_nodes.sh agent: unknown host \$host" >&2; exit 1; }
# The daemon stays in the foreground: the shell is the pid namespace's first process, and the
# namespace ends with it.
command=\$(printf '%s' "\$*" | sed 's/ --daemonize//')
exec ip netns exec "$ns_b" unshare --uts --mount --pid --fork --mount-proc --propagation private \\
  sh -c "hostname node-b && mount -t tmpfs meshvk-shm /dev/shm && mount -t tmpfs meshvk-tmp /tmp && \$command"
EOF
chmod +x "$dir/agent"

if [ "${1:-}" = --probe ]; then
  # Node B as mpirun starts it: through the agent, from inside node A.
  node "$ns_a" node-a "'$dir/agent' $subnet.2 true" 2> "$dir/setup.log" && exit 0
  echo "two_nodes.sh: this machine does not let a node have mount, UTS and pid namespaces:" >&2
  cat "$dir/setup.log" >&2
  exit 77
fi

# mpirun's arguments, quoted for the node's shell.
args=""
for a in "$@"; do
  args="$args '$(printf '%s' "$a" | sed "s/'/'\\\\''/g")'"
done
# Bounded: an outer limit's SIGKILL would run no teardown. (Open MPI splits plm_rsh_agent's value
# at spaces: the agent's path must have none.)
mpirun_command="exec timeout -k 5 $timeout_s mpirun --host $subnet.1:1,$subnet.2:1 \
  --mca plm_rsh_agent '$dir/agent' --mca plm_rsh_no_tree_spawn 1 \
  --mca oob_tcp_if_include $subnet.0/24 --mca btl_tcp_if_include $subnet.0/24 $args"
if [ -z "${MESHVK_TWO_NODES_LINK_DOWN_AT:-}" ]; then
  # In the background and waited for, so that a signal to this script tears down at once.
  node "$ns_a" node-a "$mpirun_command" &
  job=$!
  wait "$job"
  rc=$?
  job=""
  exit $rc
fi

# A lost link.
program=$(printf '%.15s' "${MESHVK_TWO_NODES_PROGRAM:?the program whose processes must end}")
node "$ns_a" node-a "$mpirun_command" > "$dir/out" 2>&1 &
job=$!
waited=0
until grep -q "^$MESHVK_TWO_NODES_LINK_DOWN_AT" "$dir/out"; do
  if ! kill -0 "$job" 2> /dev/null || [ $waited -ge 1200 ]; then
    cat "$dir/out"
    echo "two_nodes.sh: the job never printed '$MESHVK_TWO_NODES_LINK_DOWN_AT'" >&2
    exit 2
  fi
  sleep 0.1
  waited=$((waited + 1))
done
ip -n "$ns_a" link set "$veth_a" down
down=$(date +%s)
left() {  # the program's processes on either node
  for ns in "$ns_a" "$ns_b"; do
    for pid in $(ip netns pids "$ns" 2> /dev/null); do
      [ "$(cat "/proc/$pid/comm" 2> /dev/null)" = "$program" ] && echo "$pid"
    done
  done
}
while [ -n "$(left)" ]; do
  if [ $(($(date +%s) - down)) -gt "$bound" ]; then
    cat "$dir/out"
    echo "two_nodes.sh: $program still running $bound s after the link went down:" $(left) >&2
    exit 2
  fi
  sleep 0.5
done
cat "$dir/out"
echo "two_nodes.sh: link down at '$MESHVK_TWO_NODES_LINK_DOWN_AT'; every $program process had ended" \
  "$(($(date +%s) - down)) s later; mpirun and its daemon are ended now" >&2
exit 1
