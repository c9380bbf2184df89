#!/usr/bin/env python3
"""CPU time of `cat` streaming 256 MiB through its stdin and stdout: sandboxed (popen) vs
unconfined (subprocess.Popen), in the same run (rusage of cat alone: load-independent,
unlike wall-clock MB/s)."""
import subprocess, time, sandtrap, statistics, threading, os, resource
from sandtrap import PIPED
sb = sandtrap.Sandbox(fs_readable=["/usr","/lib","/bin","/etc"])
N = 256<<20; CH=256<<10
def stream(i, o):
    blk=b"x"*CH
    def w():
        left=N
        while left>0:
            i.write(blk); left-=CH
        i.close()
    t=threading.Thread(target=w); buf=bytearray(CH); n=0; t.start()
    while True:
        k=o.readinto(buf)
        if not k: break
        n+=k
    t.join()
a=[];b=[]
for r in range(5):
    p=subprocess.Popen(["cat"],stdin=subprocess.PIPE,stdout=subprocess.PIPE,bufsize=0); stream(p.stdin,p.stdout)
    _,_,ru=os.wait4(p.pid,0); b.append(ru.ru_utime+ru.ru_stime)
    q=sb.popen(["cat"],stdin=PIPED,stdout=PIPED,bufsize=0); stream(q.stdin,q.stdout); u=q.wait().usage
    a.append(u["cpu_user_s"]+u["cpu_sys_s"])
print("cat CPU seconds per 256 MiB: unconfined", [round(x,3) for x in b], "sandtrap", [round(x,3) for x in a])
print("median ratio (sandtrap/unconfined CPU):", round(statistics.median(a)/statistics.median(b),2))
