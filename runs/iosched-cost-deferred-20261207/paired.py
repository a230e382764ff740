import importlib.util, importlib.machinery, sys, math, statistics as st
from pathlib import Path
loader = importlib.machinery.SourceFileLoader("ic", "/work/main/bench/iosched-cost")
spec = importlib.util.spec_from_loader("ic", loader); ic = importlib.util.module_from_spec(spec); loader.exec_module(ic)
out = Path(sys.argv[1]); a, b = sys.argv[2], sys.argv[3]; reps=int(sys.argv[4])
data = ic.load(out, [0,1], reps, [a,b], ["randread","randwrite","mix70"])
from scipy import stats
for key in ("iops","cpu_us"):
    logs=[]
    for mode in (0,1):
        for w in ("randread","randwrite","mix70"):
            r=[math.log(x/y) for x,y in zip(data[(mode,w,a)][key], data[(mode,w,b)][key])]
            m=st.mean(r); h=stats.t.ppf(.975,len(r)-1)*st.stdev(r)/math.sqrt(len(r))
            print(f"{key} mode{mode} {w:9s} {math.exp(m):.3f} [{math.exp(m-h):.3f}, {math.exp(m+h):.3f}]")
            logs.append(r)
    per_rep=[st.mean(x) for x in zip(*logs)]
    m=st.mean(per_rep); h=stats.t.ppf(.975,len(per_rep)-1)*st.stdev(per_rep)/math.sqrt(len(per_rep))
    print(f"{key} geomean {math.exp(m):.3f} [{math.exp(m-h):.3f}, {math.exp(m+h):.3f}]")
