#!/usr/bin/env python3
"""
order_noise.py - how far fp32 scans in different summation orders land from
the serial fp32 loop, with the GPU suite's long-memory metric
(|x - serial| / (|serial| + RMS)), emulated with numpy float32 (separate
multiply and add, no FMA). It sizes the suite's long-memory tolerance: any
reordering pays this much, a wrong carry ~1.

  python3 dev/cuda/order_noise.py      # about 5 minutes

Orders: chunked64 = the library's CHUNKED tile (8 time threads x 8 steps,
Hillis-Steele over the threads, the carry chained tile after tile);
striped192 / striped256x8 = the STRIPED patch's tile (warps of 4 time
lanes scanned by shuffles, 8 warps composed in order) with 6 or 8 steps a
lane. Measured here: chunked64 3.2-3.7e-5, striped192 3.5-4.6e-5,
striped256x8 3.2-3.6e-5.
"""
import numpy as np

f=np.float32
def comp(A1,B1,A2,B2):  # (A1,B1) then (A2,B2)
    return (A2*A1).astype(f), (A2*B1+B2).astype(f)
def tiled(a,b,lanes,S,group=None):
    # a,b: (T,H) float32. lanes time lanes per tile, S steps each. group: lanes per warp (striped) or None (HS over all lanes)
    T,H=a.shape; tile=lanes*S; Tp=(T+tile-1)//tile*tile
    A=np.ones((Tp,H),f); Bv=np.zeros((Tp,H),f); A[:T]=a; Bv[:T]=b
    out=np.zeros((Tp,H),f); carry=np.zeros(H,f)
    for t0 in range(0,Tp,tile):
        xa=A[t0:t0+tile].reshape(lanes,S,H); xb=Bv[t0:t0+tile].reshape(lanes,S,H)
        la=np.ones((lanes,H),f); lb=np.zeros((lanes,H),f)
        for k in range(S):
            lb=(xa[:,k]*lb+xb[:,k]).astype(f); la=(xa[:,k]*la).astype(f)
        if group is None:
            ia,ib=la.copy(),lb.copy(); d=1
            while d<lanes:
                pa=np.ones_like(ia); pb=np.zeros_like(ib); pa[d:]=ia[:-d]; pb[d:]=ib[:-d]
                ib=(ia*pb+ib).astype(f); ia=(ia*pa).astype(f); d*=2
            ea=np.ones_like(ia); eb=np.zeros_like(ib); ea[1:]=ia[:-1]; eb[1:]=ib[:-1]
            st=(ea*carry+eb).astype(f)
            carry=(ia[-1]*carry+ib[-1]).astype(f)
        else:
            W=lanes//group
            ia=la.reshape(W,group,H).copy(); ib=lb.reshape(W,group,H).copy(); d=1
            while d<group:
                pa=np.ones_like(ia); pb=np.zeros_like(ib); pa[:,d:]=ia[:,:-d]; pb[:,d:]=ib[:,:-d]
                ib=(ia*pb+ib).astype(f); ia=(ia*pa).astype(f); d*=2
            ea=np.ones_like(ia); eb=np.zeros_like(ib); ea[:,1:]=ia[:,:-1]; eb[:,1:]=ib[:,:-1]
            wa=ia[:,-1]; wb=ib[:,-1]
            st=np.zeros((W,group,H),f); pA=np.ones(H,f); pB=np.zeros(H,f)
            for w in range(W):
                sw=(pA*carry+pB).astype(f)
                st[w]=(ea[w]*sw+eb[w]).astype(f)
                pB=(wa[w]*pB+wb[w]).astype(f); pA=(wa[w]*pA).astype(f)
            carry=(pA*carry+pB).astype(f)
            st=st.reshape(lanes,H)
        for k in range(S):
            st=(xa[:,k]*st+xb[:,k]).astype(f); out[t0+np.arange(lanes)*S+k]=st
    return out[:T]
T, H = 65537, 256
print("max |x - serial| / (|serial| + RMS), long memory a in (1 - 2^-12, 1), T = 65537, H = 256:")
rng=np.random.default_rng(7)
for trial in range(4):
    a=rng.uniform(1-2**-12,1,(T,H)).astype(f); b=rng.uniform(-1,1,(T,H)).astype(f)
    ser=np.zeros((T,H),f); hs=np.zeros(H,f)
    for t in range(T):
        hs=(a[t]*hs+b[t]).astype(f); ser[t]=hs
    rms=np.sqrt((ser.astype(np.float64)**2).mean())
    for name,x in (("chunked64",tiled(a,b,8,8)),("striped192",tiled(a,b,32,6,group=4)),("striped256x8",tiled(a,b,32,8,group=4))):
        d=np.abs(x.astype(np.float64)-ser)/(np.abs(ser)+rms)
        print(trial,name,"%.2e"%d.max())
