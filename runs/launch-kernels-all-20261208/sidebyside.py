"""The launch headline (cold real launch beside seq-write over the same launch idle, geometric mean over the
applications) under every scheduler on 6.1 and 6.12 side by side, from each kernel's compare.json (or the
summary.json this run keeps): each with its 95 % interval (Welch on the logs, smartio.launch.compare.stats), the
same off the CPU, where the headline moves between the kernels (6.12's quotient over 6.1's: moved when its interval
leaves 1), each scheduler against smartio, and issue 49's target (smartio within 1.15 of idle on both kernels).
Usage, from this folder with the project's .venv: python3 sidebyside.py [COMPARE_6.1 COMPARE_6.12], or with no
argument, summary.json."""
import json
import statistics
import sys

from smartio.launch.compare.plan import HEADLINE_BG, headline_key
from smartio.launch.compare.stats import gmean, launch_values
from smartio.storebench.stats import log_quotient_ci

KERNELS = ("6.1", "6.12")
MEASURES = ("wall", "off_cpu")


def summary(paths: list[str]) -> dict:
    """{kernel: {"kernel": release, "apps": [...], scheduler: {app: {bg: {measure: [seconds]}}}}}."""
    out = {}
    for name, path in zip(KERNELS, paths, strict=True):
        doc = json.load(open(path))
        apps = doc["plan"]["apps"]
        k = out[name] = {"kernel": doc["kernel"], "apps": apps}
        for sched, cells in doc["cells"].items():
            k[sched] = {a: {bg: {m: launch_values(cells[headline_key(a, bg)], m) for m in MEASURES}
                            for bg in ("none", HEADLINE_BG) if headline_key(a, bg) in cells} for a in apps}
    return out


def groups(doc: dict, a: tuple[str, str], b: tuple[str, str] | None, m: str) -> list | None:
    """(kernel, scheduler) a's cold launches beside the writer over idle, per application, over b's when given."""
    out = []
    for app in doc[a[0]]["apps"]:
        ca = doc[a[0]][a[1]].get(app, {})
        cb = doc[b[0]][b[1]].get(app, {}) if b else {}
        try:
            busy, idle = ca[HEADLINE_BG][m], ca["none"][m]
            other = (cb[HEADLINE_BG][m], cb["none"][m]) if b else None
        except KeyError:
            return None
        if not busy or not idle or (other and not all(other)):
            return None
        out.append(((busy,), (idle,)) if not other else ((busy, other[1]), (idle, other[0])))
    return out


def ratio(doc: dict, k: str, s: str, m: str) -> float | None:
    """The headline as `smartio compare` gives it: per application, mean launch beside the writer over mean idle."""
    vals = [statistics.fmean(doc[k][s][app][HEADLINE_BG][m]) / statistics.fmean(doc[k][s][app]["none"][m])
            for app in doc[k]["apps"] if doc[k][s].get(app, {}).get("none", {}).get(m)]
    return gmean(vals) if vals else None


def fmt(doc: dict, k: str, s: str, m: str) -> str:
    g = groups(doc, (k, s), None, m)
    ci = log_quotient_ci(g) if g else None
    r = ratio(doc, k, s, m)
    return "n/a" if r is None or ci is None else f"{r:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def main() -> None:
    args = sys.argv[1:] or ["summary.json"]
    doc = json.load(open(args[0])) if len(args) == 1 else summary(args)
    if len(args) == 2:
        json.dump(doc, open("summary.json", "w"), indent=1)
    scheds = [s for s in doc["6.1"] if s not in ("kernel", "apps")]
    print(" | ".join(f"{k}: {doc[k]['kernel']}" for k in KERNELS), f"| apps: {', '.join(doc['6.1']['apps'])}")
    n = sorted({len(v[HEADLINE_BG]["wall"] or []) for k in KERNELS for s in scheds for v in doc[k][s].values()})
    print(f"\ncold launch beside {HEADLINE_BG} over idle (geometric mean over the apps [95 % CI]; launches per cell"
          f" {n})")
    print("| scheduler | wall 6.1 | wall 6.12 | off the CPU 6.1 | off the CPU 6.12 | 6.12 over 6.1 (wall) |")
    print("|---|---|---|---|---|---|")
    for s in scheds:
        g = groups(doc, ("6.12", s), ("6.1", s), "wall")
        ci = log_quotient_ci(g) if g else None
        r612, r61 = ratio(doc, "6.12", s, "wall"), ratio(doc, "6.1", s, "wall")
        move = "n/a" if not (ci and r612 and r61) else f"{r612 / r61:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" + (
            " moved" if ci[0] > 1 or ci[1] < 1 else "")
        cells = [fmt(doc, k, s, m) for m in MEASURES for k in KERNELS]
        print(f"| {s} | {' | '.join(cells)} | {move} |")
    print()
    for k in KERNELS:
        g = groups(doc, (k, "smartio"), None, "wall")
        ci = log_quotient_ci(g) if g else None
        verdict = "not measured" if not ci else "met" if ci[1] <= 1.15 else "NOT met" if ci[0] > 1.15 else "undecided"
        print(f"  {k}: smartio within 1.15 of idle: {verdict}")
        for s in scheds:
            if s == "smartio":
                continue
            g = groups(doc, (k, s), (k, "smartio"), "wall")
            ci = log_quotient_ci(g) if g else None
            if ci:
                side = "higher" if ci[0] > 1 else "lower" if ci[1] < 1 else "a tie"
                print(f"  {k}: {s} over smartio [{ci[0]:.3f}, {ci[1]:.3f}]: {side}")


if __name__ == "__main__":
    main()
