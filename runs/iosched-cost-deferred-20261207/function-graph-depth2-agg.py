import re,sys,collections
for fn in sys.argv[1:]:
    top=None; tot=collections.defaultdict(float); cnt=collections.Counter(); tops=collections.Counter(); toptime=collections.defaultdict(float)
    for line in open(fn):
        m=re.match(r'\s*\d+\)\s+(?:[+!#*@$ ]\s*)?([\d.]+) us\s+\|\s+(\s*)(\S+?)(?: \[smartio_iosched\])?\(\);',line)
        m2=re.match(r'\s*\d+\)\s+\|\s+(\S+?)(?: \[smartio_iosched\])?\(\) \{',line)
        m3=re.match(r'\s*\d+\)\s+(?:[+!#*@$ ]\s*)?([\d.]+) us\s+\|\s+\}',line)
        if m2: top=m2.group(1); tops[top]+=1; continue
        if m3 and top: toptime[top]+=float(m3.group(1)); top=None; continue
        if m and top:
            tot[(top,m.group(3))]+=float(m.group(1)); cnt[(top,m.group(3))]+=1
    print('==',fn)
    for t in tops: print(f'{t:28s} n={tops[t]} mean={toptime[t]/tops[t]:.2f}')
    for k in sorted(tot,key=lambda k:-tot[k])[:25]:
        t=k[0]; print(f'  {k[0]:24s} {k[1]:34s} per-top-call={tot[k]/tops[t]:.2f}us calls/top={cnt[k]/tops[t]:.2f}')
