#!/bin/bash
# SPDX-License-Identifier: MIT
# A slow link is not a dead peer. Two movers in two network namespaces
# joined by veth (tcp, one shard each, --no-host-copy so that the bytes
# cross the veth), A's end shaped to 32 Mbit/s (tc tbf), a 1.5 s op
# deadline and 250 ms heartbeats. A client on A writes 16 MiB and an
# immediate to B, which takes ~4.4 s (a 4 MiB piece ~1.1 s): every byte
# must land, B's client must get the immediate it expects from A, and A's
# client must still get one it expects from B: neither may hear "hung or
# unreachable" from heartbeats queued behind the data. Then the same write
# with A's link taken down 2.5 s in: it must fail, naming the peer, after
# the link went, within the deadline and a little. And two clients of A's
# one shard writing 8 MiB each by turns (fair share cuts their writes into
# pieces): both must land, though each takes longer than the deadline.
# And A's tcp connections to B reset 2 s into the 16 MiB write (ss -K):
# the writes they flushed are retried, though queued longer than the
# deadline, and land. And one client writing 48 MiB to B and then 1 MiB to
# a third mover on A's host: the 1 MiB must wait neither for B's backlog
# nor for one of B's pieces to make room; nor must it behind 32 MiB to B,
# all of it in flight.
# Prints each measured time. Skipped, with the reason, where namespaces or
# tc cannot be used or Python with numpy (the client is the binding) is
# missing.
set -u
B=${MV_BUILD:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-/usr/bin/python3}
DEADLINE=1.5
. "$here"/tests/netns_skip.sh
netns_or_skip slow_link tc
numpy_or_skip slow_link "the client"
dir=$(mktemp -d /tmp/mvslow.XXXXXX)
trap '"$here"/tools/mvhosts.sh down "$dir" >/dev/null 2>&1; rm -rf "$dir"' EXIT

cat >"$dir"/probe.py <<'PROBE'
import os, subprocess, sys, threading, time
import numpy as np
import mover

mode, down, reset, deadline = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
n = 16 << 20
a = mover.Client(os.environ["MV_SOCK_A"])
b = mover.Client(os.environ["MV_SOCK_B"])
src, dst, back = a.alloc(n), b.alloc(n), a.alloc(4096)
s_, d_ = src.numpy(), dst.numpy()
s_[:] = (np.arange(n, dtype=np.uint32) % 251).astype(np.uint8)
b_on_a = a.peer_add(b.address())
imp = a.import_region(b_on_a, dst.blob())
a_on_b = b.peer_add(a.address())
imp_back = b.import_region(a_on_b, back.blob())
imm = lambda e: e.type == mover.EventType.IMM_COUNT
if mode == "slow":
    # Each side expects an immediate naming the other: a false "hung or
    # unreachable" from either mover's heartbeats fails it.
    b.imm_expect_from(a_on_b, 9, 1, cookie=9)
    a.imm_expect_from(b_on_a, 7, 1, cookie=7)
if mode in ("hol", "hol2"):
    # One client, two peers: to B behind the slow link, then to C, a mover
    # in A's own namespace (loopback: fast). hol: 48 MiB to B (more than
    # the 32 MiB a client alone has in flight: 16 MiB of it queued), then
    # 1 MiB to C. hol2: 32 MiB to B, all of it in flight (the whole cap,
    # none queued to pass), then 1 MiB to C. C's write waits neither for
    # B's backlog nor for room, one of B's 4 MiB pieces (about 1 s): B's
    # bytes in flight count only up to half the cap for it.
    slow, fast = (48 << 20 if mode == "hol" else 32 << 20), 1 << 20
    c = mover.Client(os.environ["MV_SOCK_C"])
    dst_c = c.alloc(fast)
    imp_c = a.import_region(a.peer_add(c.address()), dst_c.blob())
    a.write(src, 0, imp_c, 0, 4096)  # met and connected before the clock
    a.wait_batch(a.submit(), timeout=10)
    big = a.alloc(slow)
    imp_big = a.import_region(b_on_a, b.alloc(slow).blob())
    a.write(big, 0, imp_big, 0, slow)
    a.submit()
    time.sleep(0.2)
    t0 = time.monotonic()
    a.write(src, 0, imp_c, 0, fast)
    cookie = a.submit()
    ev = a.wait_for(lambda e: e.type == mover.EventType.BATCH and e.cookie == cookie, 60)
    dt = time.monotonic() - t0
    same = bool((dst_c.numpy() == s_[:fast]).all())
    ok = ev.ok and same and dt <= 0.5
    print(f"slow_link: {fast >> 20} MiB to a fast peer behind {slow >> 20} MiB to the slow one, "
          f"one client: {'landed' if ev.ok else ev.msg} in {dt:.2f} s (bar 0.5 s; the slow one's "
          f"backlog takes {slow * 8 / 32e6:.1f} s, one of its pieces about 1 s), bytes "
          f"{'match' if same else 'DIFFER'}{'' if ok else ' FAILED'}")
    sys.exit(0 if ok else 1)
if mode == "shared":
    # Two clients of one shard, 8 MiB each: fair share cuts each write
    # into pieces by turns, and each write's rest waits while the other's
    # pieces go, longer than the deadline in all; its wait starts again
    # with each of its pieces.
    y = mover.Client(os.environ["MV_SOCK_A"])
    src_y = y.alloc(n // 2)
    src_y.numpy()[:] = s_[n // 2:]
    imp_y = y.import_region(y.peer_add(b.address()), dst.blob())
    t0 = time.monotonic()
    a.write(src, 0, imp, 0, n // 2)
    y.write(src_y, 0, imp_y, n // 2, n // 2)
    evs = []
    for c in (a, y):
        ck = c.submit()
        evs.append((c, ck))
    evs = [c.wait_for(lambda e, ck=ck: e.type == mover.EventType.BATCH and e.cookie == ck, 60)
           for c, ck in evs]
    dt = time.monotonic() - t0
    same = bool((d_ == s_).all())
    landed = all(e.ok for e in evs) and same
    ok = landed and dt >= 2 * deadline
    print(f"slow_link: two clients of one shard, 8 MiB each over 32 Mbit/s, op deadline "
          f"{deadline:g} s: {', '.join('landed' if e.ok else e.msg for e in evs)} in {dt:.2f} s, "
          f"bytes {'match' if same else 'DIFFER'}"
          f"{' (the link was not slowed: nothing shown)' if landed and not ok else ''}"
          f"{'' if ok else ' FAILED'}")
    sys.exit(0 if ok else 1)
t0 = time.monotonic()
if mode == "down":  # the link goes 2.5 s in, two pieces landed, the write under way
    threading.Timer(2.5, subprocess.run, (down,), {"shell": True, "check": True}).start()
killed = []
kill = threading.Timer(2.0, lambda: killed.append(subprocess.run(
    reset, shell=True, capture_output=True, text=True).stdout.count("ESTAB")))
if mode == "reset":  # A's connections to B reset 2 s in (ss -K): rxm reconnects
    kill.start()
a.write(src, 0, imp, 0, n)
a.write_imm(imp, 9)
cookie = a.submit()
ev = a.wait_for(lambda e: e.type == mover.EventType.BATCH and e.cookie == cookie, 60)
dt = time.monotonic() - t0
if mode == "reset":
    kill.join()
    if not killed[0]:
        print("slow_link: reset: SKIPPED: ss -K killed no socket here (kernel without "
              "CONFIG_INET_DIAG_DESTROY?)")
        sys.exit(0)
    same = bool((d_ == s_).all())
    ok = ev.ok and same and dt >= 2 * deadline
    print(f"slow_link: {killed[0]} connections reset 2 s into the write (queued longer than the "
          f"{deadline:g} s deadline): {'landed' if ev.ok else ev.msg} in {dt:.2f} s, bytes "
          f"{'match' if same else 'DIFFER'}{'' if ok else ' FAILED'}")
    sys.exit(0 if ok else 1)
if mode == "slow" and not ev.ok:
    print(f"slow_link: 16 MiB over 32 Mbit/s, op deadline {deadline:g} s: failed "
          f"{dt:.2f} s in: {ev.msg} FAILED")
    sys.exit(1)
if mode == "slow":
    at_b = b.wait_for(imm, timeout=10)
    b.write_imm(imp_back, 7)
    b.wait_batch(b.submit(), timeout=10)
    at_a = a.wait_for(imm, timeout=10)
    same = bool((d_ == s_).all())
    shown = dt >= 2 * deadline
    ok = ev.ok and at_b.ok and at_a.ok and same and shown
    print(f"slow_link: 16 MiB over 32 Mbit/s, op deadline {deadline:g} s: "
          f"{'landed' if ev.ok else ev.msg} in {dt:.2f} s, bytes {'match' if same else 'DIFFER'}; "
          f"B's expectation of A's immediate: {'met' if at_b.ok else at_b.msg}; A's of B's: "
          f"{'met' if at_a.ok else at_a.msg}"
          f"{'' if shown else ' (the link was not slowed: nothing shown)'}{'' if ok else ' FAILED'}")
else:
    late = dt - 2.5
    ok = (not ev.ok and f"{b.info.mover_id:016x}" in ev.msg and
          f"in {deadline * 1000:.0f} ms" in ev.msg and 0 < late <= deadline + 1.5)
    print(f"slow_link: link down 2.5 s into the write: {'FAILED: it landed' if ev.ok else 'failed'} "
          f"{late:.2f} s after the link went (bar: the deadline, {deadline:g} s, + 1.5): "
          f"{ev.msg}{'' if ok else ' FAILED'}")
sys.exit(0 if ok else 1)
PROBE

run() { # mode
	"$here"/tools/mvhosts.sh down "$dir" >/dev/null 2>&1
	MV_BUILD=$B MV_TAG=slow$$ MV_MOVER_ARGS="--op-timeout $DEADLINE --heartbeat 0.25 --no-host-copy" \
		"$here"/tools/mvhosts.sh up "$dir" tcp 1 >/dev/null || return 2
	. "$dir"/env
	if [ "$MV_NETNS" != 1 ]; then
		echo "slow_link: FAILED: namespaces were permitted but the movers did not start in them"
		return 1
	fi
	# A queue of 20 ms at the link, as a switch keeps; the rest waits in
	# the sockets, as on a real slow or shared link.
	if ! ip netns exec "$MV_NS_A" tc qdisc add dev "$MV_IF_A" root tbf rate 32mbit \
		burst 64kb latency 20ms; then
		echo "slow_link: SKIPPED: tc tbf is not available here (kernel module sch_tbf)"
		exit 0
	fi
	local cpid=
	if [ "$1" = hol ] || [ "$1" = hol2 ]; then # a third mover, C, on A's host: fast loopback
		rm -f "$dir"/c.sock
		ip netns exec "$MV_NS_A" "$B"/bin/mover --no-config --provider tcp --iface lo --shards 1 \
			--socket "$dir"/c.sock --op-timeout $DEADLINE --no-host-copy >"$dir"/c.log 2>&1 &
		cpid=$!
		for _ in $(seq 100); do [ -S "$dir"/c.sock ] && break; sleep 0.05; done
	fi
	MV_SOCK_A=$MV_SOCK_A MV_SOCK_B=$MV_SOCK_B MV_SOCK_C="$dir"/c.sock \
		PYTHONPATH="$here"/libclient/python MV_BUILD=$B \
		timeout 120 "$PY" "$dir"/probe.py "$1" "ip -n $MV_NS_A link set $MV_IF_A down" \
		"ip netns exec $MV_NS_A ss -K dst 10.77.0.2" "$DEADLINE"
	local rc=$?
	[ -n "$cpid" ] && kill "$cpid" && wait "$cpid" 2>/dev/null
	[ $rc = 0 ] || { echo "slow_link: $1: see the movers' logs:"; tail -n 5 "$dir"/a.log "$dir"/b.log; }
	return $rc
}

fail=0
run slow || fail=1
run shared || fail=1
run hol || fail=1
run hol2 || fail=1
run reset || fail=1
run down || fail=1
[ $fail = 0 ] && echo "slow_link: passed" || echo "slow_link: FAILED"
exit $fail
