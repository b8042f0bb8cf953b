# Predicted vs measured forwarding loss of the match-all tap: per tapped frame,
# copied share x one copy + dropped share x one drop (tap_cost --copy, isolated), against
# 1/matchall - 1/none from bench capture (medians), over the tapped share of frames.
import json,glob,sys
c_copy=float(sys.argv[1]) if len(sys.argv)>1 else 22.5
c_drop=float(sys.argv[2]) if len(sys.argv)>2 else 1.0
for b,c in [('base','1020ab3'),('arena','66dd61f')]:
    for f in sorted(glob.glob(f'capture-matchall-xeon-{c}-*.json')):
        d=json.load(open(f))
        med={(r['topology'],r['workers'],r['scenario']):r['median_mpps_per_worker'] for r in d['rows']}
        cnt={}
        for r in d['runs']:
            k=(r['topology'],r['workers'],r['scenario'])
            c=cnt.setdefault(k,[0,0,0]); c[0]+=r['matched']; c[1]+=r['written']; c[2]+=r['dropped']
        for (t,w,s),m in sorted(med.items()):
            if s!='matchall': continue
            loss=1000/m-1000/med[(t,w,'none')]
            share=2/3 if t=='bridge' else 1.0
            mt,wr,dr=cnt[(t,w,s)]
            pc=wr/mt; pd=dr/mt
            pred=pc*c_copy+pd*c_drop
            print(f"{b:5} {f[-6]} {t:6} {w}w  none {med[(t,w,'none')]:5.2f} matchall {m:5.2f}  loss/tapped frame {loss/share:5.2f} ns  copied {100*pc:4.1f}%  predicted {pred:5.2f} ns")
