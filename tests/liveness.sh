#!/bin/bash
# SPDX-License-Identifier: MIT
# Peer liveness across two hosts: two movers in two network namespaces
# joined by veth (tcp), heartbeats every 250 ms. A client on host B expects
# immediates from host A's mover (mvc_imm_expect_from); then A's mover is
# killed (kill -9; also with the movers in pid namespaces of their own, so
# that only heartbeats can tell), stopped (SIGSTOP), or A's link goes down,
# and B's client must hear of it within 3 heartbeat intervals. After SIGCONT and
# link up, B must take A's immediates again. Prints each measured time.
# Skipped, with the reason, where namespaces cannot be made or Python with
# numpy (the probe is the binding) is missing.
set -u
B=${MV_BUILD:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
HB=${MV_LIVENESS_HB:-0.25}
PY=${PYTHON:-/usr/bin/python3}
. "$here"/tests/netns_skip.sh
netns_or_skip liveness
numpy_or_skip liveness "the probe"
dir=$(mktemp -d /tmp/mvlive.XXXXXX)
trap '"$here"/tools/mvhosts.sh down "$dir"; rm -rf "$dir"' EXIT

# The probe: B's client expects from A's mover, the fault is applied, and
# the time to B's error event is measured from just before the fault.
# Exit status: 0 in time, 1 late or wrong, 2 could not set up.
cat >"$dir"/probe.py <<'EOF'
import os, subprocess, sys, time
import mover

name, hb, fault, undo = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
a = mover.Client(os.environ["MV_SOCK_A"])
b = mover.Client(os.environ["MV_SOCK_B"])
dst = b.alloc(1 << 20)
imp = a.import_region(a.peer_add(b.address()), dst.blob())
sender = b.peer_add(a.address())
count = lambda e: e.type == mover.EventType.IMM_COUNT

def through(imm, cookie, timeout):
    """A's immediate reaches B's expectation of it within timeout s."""
    b.imm_expect_from(sender, imm, 1, cookie=cookie)
    a.write_imm(imp, imm)
    a.wait_batch(a.submit(), timeout=timeout)
    return b.wait_for(count, timeout=timeout)

ev = through(1, 1, 10)
if not ev.ok:
    print(f"liveness: {name}: FAILED: a healthy peer's immediate: {ev.msg}")
    sys.exit(2)
b.imm_expect_from(sender, 2, 1, cookie=2)
time.sleep(3 * hb)  # heartbeats answered for a while: a steady state
t0 = time.monotonic()
subprocess.run(fault, shell=True, check=True)
ev = b.wait_for(count, timeout=10 * hb + 5)
dt = time.monotonic() - t0
ok = (not ev.ok and ev.cause == mover.Cause.PEER_DEAD and ev.cookie == 2 and
      f"{a.info.mover_id:016x}" in ev.msg and dt <= 3 * hb)
print(f"liveness: {name}: told in {dt * 1000:.0f} ms ({dt / hb:.2f} x {hb * 1000:.0f} ms, "
      f"bar 3 x): status {ev.status}: {ev.msg}{'' if ok else ' FAILED'}")
if not ok:
    sys.exit(1)
if undo == "-":
    sys.exit(0)
subprocess.run(undo, shell=True, check=True)
t1 = time.monotonic()
# Back: B's mover hears A's heartbeats answered again, and B's client
# reads that news before it expects anew; tcp may wait out a
# retransmission timeout first after a link came back.
cookie = 3
while time.monotonic() - t1 < 30:
    b.wait(hb)
    cookie += 1
    try:
        ev = through(cookie, cookie, 2)
    except mover.MoverError:  # the batch did not complete in time: not yet
        continue
    if ev.ok:
        break
print(f"liveness: {name}: back, immediates expected again, {time.monotonic() - t1:.1f} s "
      f"after the fault was undone{'' if ev.ok else ': FAILED'}")
sys.exit(0 if ev.ok else 1)
EOF

run() { # name fault undo [wrapper]
	"$here"/tools/mvhosts.sh down "$dir" >/dev/null 2>&1
	MV_BUILD=$B MV_TAG=h17a$$ MV_MOVER_ARGS="--heartbeat $HB" MV_MOVER_WRAP="${4:-}" \
		"$here"/tools/mvhosts.sh up "$dir" tcp 2 >/dev/null || return 2
	. "$dir"/env
	if [ "$MV_NETNS" != 1 ]; then
		echo "liveness: FAILED: namespaces were permitted but the movers did not start in them"
		return 1
	fi
	local fault undo
	fault=$(eval echo "\"$2\"") undo=$(eval echo "\"$3\"")
	MV_SOCK_A=$MV_SOCK_A MV_SOCK_B=$MV_SOCK_B PYTHONPATH="$here"/libclient/python MV_BUILD=$B \
		timeout 120 "$PY" "$dir"/probe.py "$1" "$HB" "$fault" "$undo"
	local rc=$?
	# A stopped mover takes no SIGTERM: let it go on first.
	kill -CONT "$MV_PID_A" 2>/dev/null
	[ $rc = 0 ] || { echo "liveness: $1: see the movers' logs:"; tail -n 5 "$dir"/a.log "$dir"/b.log; }
	return $rc
}

fail=0
run "kill -9" 'kill -KILL $MV_PID_A' - || fail=1
# In pid namespaces of their own the movers cannot watch each other's pid,
# as on two real hosts: the heartbeats alone must tell.
if unshare --pid --fork --kill-child true 2>/dev/null; then
	run "kill -9, heartbeats alone" 'kill -KILL $MV_PID_A' - "unshare --pid --fork --kill-child" ||
		fail=1
else
	echo "liveness: kill -9, heartbeats alone: SKIPPED: unshare --pid is not permitted here"
fi
run "SIGSTOP" 'kill -STOP $MV_PID_A' 'kill -CONT $MV_PID_A' || fail=1
run "link down" 'ip -n $MV_NS_A link set $MV_IF_A down' 'ip -n $MV_NS_A link set $MV_IF_A up' || fail=1
[ $fail = 0 ] && echo "liveness: passed" || echo "liveness: FAILED"
exit $fail
