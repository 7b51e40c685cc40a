"""The test suite's time, by file and by test, from one `make test` run.

    PARAGAN_TF_TEST_COSTS=/tmp/costs.jsonl make test
    python benchmarks/probes/test_durations.py --costs=/tmp/costs.jsonl [--top=25] \
        [--json=summary.json] [--before_costs=/tmp/costs_before.jsonl] \
        [--junit=/tmp/junit.xml] [--before_junit=/tmp/junit_before.xml]

--junit is pytest's own report (each test's set-up, call and tear-down seconds); --costs,
optional, is what tests/helpers/costs.py recorded of the same run: CPU seconds in the test's
process and in the processes it started, and how many it started. A process's start-up is
dominated by importing TensorFlow: --import_cpu (measured here when not given) times the
number of processes estimates that share. --before_costs, an earlier run's --costs file
(possibly of a run stopped early), adds each of the slowest files' wall and CPU seconds before
and after, summed over the tests both files hold. --before_junit, an earlier run's --junit
(of an older checkout, whose files may have moved since), adds each of the slowest files' wall
seconds before and after: a test is found in the earlier run by its file, or else by its name
where that name is one test's there.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import xml.etree.ElementTree as ET

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _file_of(classname: str, moved: bool = False) -> str:
    """tests/train/test_step.py for 'tests.train.test_step' (or '...test_step.SomeClass');
    `moved`: a file of an older checkout that may be gone here (then the whole name)."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        path = os.path.join(*parts[:end]) + ".py"
        if os.path.exists(os.path.join(REPO, path)):
            return path
    if moved:
        return os.path.join(*parts) + ".py"
    raise ValueError(f"no test file for {classname!r}")


def read_junit(path: str, moved: bool = False) -> dict:
    """{test id: seconds} (set-up, call and tear-down together: pytest's 'total')."""
    tests = {}
    for case in ET.parse(path).iter("testcase"):
        name = f"{_file_of(case.get('classname'), moved)}::{case.get('name')}"
        tests[name] = tests.get(name, 0.0) + float(case.get("time", 0.0))
    return tests


def read_costs(path: str) -> dict:
    """{test id: its line} of tests/helpers/costs.py's file."""
    with open(path) as f:
        return {line["test"]: line for line in map(json.loads, f) if line}


def by_file(tests: dict) -> dict:
    files = collections.defaultdict(float)
    for name, seconds in tests.items():
        files[name.split("::")[0]] += seconds
    return dict(sorted(files.items(), key=lambda kv: -kv[1]))


def compared(before: dict, after: dict) -> dict:
    """{file: (tests, wall before, wall after, CPU before, CPU after)} over the tests both
    cost records hold (a run stopped early holds only some)."""
    files = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0, 0.0])
    for name in before.keys() & after.keys():
        row = files[name.split("::")[0]]
        row[0] += 1
        for i, line in ((1, before[name]), (2, after[name])):
            row[i] += line["wall"]
            row[i + 2] += line["cpu_self"] + line["cpu_children"]
    return {path: tuple(row) for path, row in files.items()}


def compared_walls(before: dict, after: dict) -> dict:
    """{file: (tests found, wall before, wall after)}: each test of `after` found in
    `before` by its id, or else by its name where only one test there has it."""
    by_name = collections.defaultdict(list)
    for name in before:
        by_name[name.split("::", 1)[1]].append(name)
    files = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for name, seconds in after.items():
        row = files[name.split("::")[0]]
        same = by_name.get(name.split("::", 1)[1], [])
        earlier = name if name in before else (same[0] if len(same) == 1 else None)
        if earlier is not None:
            row[0] += 1
            row[1] += before[earlier]
            row[2] += seconds
    return {path: tuple(row) for path, row in files.items()}


def import_cpu() -> float:
    """CPU seconds of a fresh process that imports what every binary imports."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", "import paragan_tf.train.experiment"], cwd=REPO,
                   check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--junit", help="pytest's report; without it, the walls --costs "
                        "recorded (all `make test` runs: its two sessions cannot share one)")
    parser.add_argument("--costs")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--import_cpu", type=float)
    parser.add_argument("--before_costs", help="an earlier run's --costs file: each file's "
                        "wall and CPU before and after, over the tests both hold")
    parser.add_argument("--before_junit", help="an earlier run's --junit file: each file's "
                        "wall before and after, over the tests both hold")
    parser.add_argument("--json", help="also write the whole summary here")
    args = parser.parse_args(argv)
    if not (args.junit or args.costs):
        parser.error("give --junit, --costs or both")
    costs = read_costs(args.costs) if args.costs else {}
    tests = (read_junit(args.junit) if args.junit else
             {name: line["wall"] for name, line in costs.items()})
    files = by_file(tests)
    total = sum(tests.values())
    print(f"{len(tests)} tests in {len(files)} files, {total:.0f} s of test time in all")
    print(f"\nthe {args.top} slowest files (seconds):")
    for path, seconds in list(files.items())[:args.top]:
        print(f"  {seconds:7.1f}  {path}")
    summary = dict(tests=len(tests), total_seconds=round(total, 1),
                   files={k: round(v, 1) for k, v in files.items()})
    if costs:
        per_process = args.import_cpu if args.import_cpu is not None else import_cpu()
        print(f"\nthe {args.top} slowest tests: wall, CPU in the test's process, CPU in "
              f"the processes it started (of which start-up at {per_process:.1f} s each), "
              f"and off the CPU (wall - CPU: waiting, or queued behind the other workers)")
        rows = []
        for name, seconds in sorted(tests.items(), key=lambda kv: -kv[1])[:args.top]:
            line = costs.get(name, {})
            own, children = line.get("cpu_self", 0.0), line.get("cpu_children", 0.0)
            started = line.get("processes", 0)
            rows.append(dict(test=name, wall=round(seconds, 1), cpu_self=own,
                             cpu_children=children, processes=started,
                             startup=round(started * per_process, 1)))
            print(f"  {seconds:6.1f}  self {own:6.1f}  children {children:6.1f} "
                  f"({started} processes, ~{started * per_process:5.1f} start-up)  "
                  f"off CPU ~{max(0.0, seconds - own - children):5.1f}  {name}")
        summary.update(import_cpu=round(per_process, 2), slowest=rows,
                       cpu_self=round(sum(c["cpu_self"] for c in costs.values()), 1),
                       cpu_children=round(sum(c["cpu_children"] for c in costs.values()), 1),
                       processes=sum(c["processes"] for c in costs.values()))
        print(f"\nall tests: {summary['cpu_self']:.0f} CPU s in the workers, "
              f"{summary['cpu_children']:.0f} in {summary['processes']} started processes")
        memory = [c for c in costs.values() if "rss_mib" in c]  # recorded since 2026-11-29
        if memory:
            peak = {}
            for c in memory:
                peak[c["worker"]] = max(peak.get(c["worker"], 0), c["rss_mib"])
            summary.update(peak_rss_mib=peak,
                           least_available_mib=min(c["available_mib"] for c in memory),
                           major_faults=sum(c["major_faults"] for c in memory))
            print(f"memory: each worker's largest resident MiB {peak}; the least the machine "
                  f"had available after a test {summary['least_available_mib']} MiB; "
                  f"{summary['major_faults']} page faults the workers waited on disk for")
            # What each file adds to its worker: the growth over its tests, each measured
            # from the worker's previous line (the lines are in the order they were written).
            added, last = {}, {}
            for test, c in costs.items():
                if "rss_mib" in c and c["worker"] in last:
                    path = test.split("::")[0]
                    added[path] = added.get(path, 0) + c["rss_mib"] - last[c["worker"]]
                last[c["worker"]] = c.get("rss_mib", last.get(c["worker"]))
            top = sorted(added.items(), key=lambda kv: -kv[1])[:args.top]
            summary.update(added_rss_mib=dict(top))
            print(f"the {len(top)} files that added most to their worker's resident MiB:")
            for path, mib in top:
                print(f"  {mib:8d}  {path}")
    if costs and args.before_costs:
        both = compared(read_costs(args.before_costs), costs)
        print(f"\nthe {args.top} slowest files, over the tests both cost records hold: "
              f"tests, wall s before -> after, CPU s before -> after")
        for path in list(files)[:args.top]:
            n, wall_0, wall_1, cpu_0, cpu_1 = both.get(path, (0, 0.0, 0.0, 0.0, 0.0))
            print(f"  {n:3d}  {wall_0:7.0f} -> {wall_1:7.0f}  {cpu_0:7.0f} -> {cpu_1:7.0f}"
                  f"  {path}")
        sums = [sum(row[i] for row in both.values()) for i in range(5)]
        print(f"  all {sums[0]} tests both hold: wall {sums[1]:.0f} -> {sums[2]:.0f} s, "
              f"CPU {sums[3]:.0f} -> {sums[4]:.0f} s")
        summary["compared"] = both
    if args.before_junit:
        before = read_junit(args.before_junit, moved=True)
        walls = compared_walls(before, tests)
        print(f"\nthe {args.top} slowest files against the earlier run ({len(before)} tests, "
              f"{sum(before.values()):.0f} s): tests found there, of the file's; wall s "
              f"before -> after (those tests)")
        for path in list(files)[:args.top]:
            n, wall_0, wall_1 = walls.get(path, (0, 0.0, 0.0))
            held = sum(1 for name in tests if name.split("::")[0] == path)
            print(f"  {n:3d} of {held:3d}  {wall_0:7.1f} -> {wall_1:7.1f}  {path}")
        summary["compared_walls"] = walls
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
