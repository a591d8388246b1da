"""Sums callgrind_annotate's per-(file, function) lines by function: the exclusive
instructions of each specops pass, with the inlined headers (intrinsics, pexp) folded into the
function they are inlined in.  Usage: callgrind_annotate FILE | python bench/harness/fold.py"""
import re
import sys
from collections import Counter

per = Counter()
for line in sys.stdin:
    m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(.*)$", line.rstrip("\n"))
    if not m or "PROGRAM TOTALS" in line:
        continue
    rest = m.group(2)
    cut = next((i for i, c in enumerate(rest) if c == ":" and rest[i + 1:i + 2] != ":"
                and rest[i - 1:i] != ":"), None)
    if cut is None:
        continue
    fn = rest[cut + 1:].split(" [")[0]
    fn = re.sub(r"\(.*", "", fn.replace("specops::(anonymous namespace)::", ""))
    per[fn.replace("specops::", "")] += int(m.group(1).replace(",", ""))
total = sum(per.values())
for fn, n in per.most_common(16):
    print(f"{n:>13,}  {100 * n / total:5.1f}%  {fn}")
