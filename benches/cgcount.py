import sys,re
path,prefix=sys.argv[1],sys.argv[2]
lines=open(path).read().split('\n')
names={};calls=0;cur=None;total=None
for l in lines:
    m=re.match(r'(c?fn)=\((\d+)\)(?: (.*))?',l)
    if m:
        kind,i,n=m.groups()
        if n: names[i]=n
        if kind=='cfn': cur=i
        continue
    if l.startswith('summary:'): total=int(l.split()[1])
    if l.startswith('calls=') and cur and names.get(cur,'').startswith(prefix):
        calls+=int(l.split('=')[1].split()[0])
print(f"{path}: Ir={total} calls={calls} Ir/call={total/calls:.0f}")
