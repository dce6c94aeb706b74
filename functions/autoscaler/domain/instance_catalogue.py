"""The instance types EC2 offered when this catalogue was generated (from the DescribeInstanceTypes data
moto ships), by family. Validation checks NodePool requirements on instance types and families against
it; a name missing here is a WARNING, not an error, because AWS adds types after a release.
The catalogue is data in a module (not a file read at run time) so the pure domain can use it.
"""

from __future__ import annotations

import re

# One line per family (long families continue on a second line): the family, then its sizes.
_DATA = """
a1 medium large xlarge 2xlarge 4xlarge metal
c1 medium xlarge
c3 large xlarge 2xlarge 4xlarge 8xlarge
c4 large xlarge 2xlarge 4xlarge 8xlarge
c5 large xlarge 2xlarge 4xlarge 9xlarge 12xlarge 18xlarge 24xlarge metal
c5a large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge
c5ad large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge
c5d large xlarge 2xlarge 4xlarge 9xlarge 12xlarge 18xlarge 24xlarge metal
c5n large xlarge 2xlarge 4xlarge 9xlarge 18xlarge metal
c6a large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge metal
c6g medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge metal
c6gd medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge metal
c6gn medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge
c6i large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge metal
c6id large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge metal
c6in large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge metal
c7a medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge metal-48xl
c7g medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge metal
c7gd medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge metal
c7gn medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge metal
c7i large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-24xl metal-48xl
c7i-flex large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge
c8a medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-24xl metal-48xl
c8g medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-24xl metal-48xl
c8gb medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-24xl metal-48xl
c8gd medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-24xl metal-48xl
c8gn medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-24xl metal-48xl
c8i large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge 96xlarge metal-48xl
c8i metal-96xl
c8i-flex large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge
c8ib large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge 96xlarge metal-48xl
c8ib metal-96xl
c8id large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge 96xlarge metal-48xl
c8id metal-96xl
c8in large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge 96xlarge metal-48xl
c8in metal-96xl
c8ine large xlarge 2xlarge 4xlarge 8xlarge 12xlarge
c9g medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-48xl
c9gd medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-48xl
d2 xlarge 2xlarge 4xlarge 8xlarge
d3 xlarge 2xlarge 4xlarge 8xlarge
d3en xlarge 2xlarge 4xlarge 6xlarge 8xlarge 12xlarge
dl2q 24xlarge
f2 6xlarge 12xlarge 48xlarge
g4dn xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge metal
g5 xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge
g5g xlarge 2xlarge 4xlarge 8xlarge 16xlarge metal
g6 xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge
g6e xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge
g6f large xlarge 2xlarge 4xlarge
g7 2xlarge 4xlarge 8xlarge 12xlarge 24xlarge 48xlarge
g7e 2xlarge 4xlarge 8xlarge 12xlarge 24xlarge 48xlarge
gr6 4xlarge 8xlarge
gr6f 4xlarge
h1 2xlarge 4xlarge 8xlarge 16xlarge
hpc6a 48xlarge
hpc6id 32xlarge
hpc7a 12xlarge 24xlarge 48xlarge 96xlarge
hpc7g 4xlarge 8xlarge 16xlarge
hpc8a 96xlarge
i2 xlarge 2xlarge 4xlarge 8xlarge
i3 large xlarge 2xlarge 4xlarge 8xlarge 16xlarge
i3en large xlarge 2xlarge 3xlarge 6xlarge 12xlarge 24xlarge metal
i4g large xlarge 2xlarge 4xlarge 8xlarge 16xlarge
i4i large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge metal
i7i large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-24xl metal-48xl
i7ie large xlarge 2xlarge 3xlarge 6xlarge 12xlarge 18xlarge 24xlarge 48xlarge metal-24xl metal-48xl
i8g large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-24xl metal-48xl
i8ge large xlarge 2xlarge 3xlarge 6xlarge 12xlarge 18xlarge 24xlarge 48xlarge metal-24xl metal-48xl
im4gn large xlarge 2xlarge 4xlarge 8xlarge 16xlarge
inf1 xlarge 2xlarge 6xlarge 24xlarge
inf2 xlarge 8xlarge 24xlarge 48xlarge
is4gen medium large xlarge 2xlarge 4xlarge 8xlarge
m1 small medium large xlarge
m2 xlarge 2xlarge 4xlarge
m3 medium large xlarge 2xlarge
m4 large xlarge 2xlarge 4xlarge 10xlarge 16xlarge
m5 large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge metal
m5a large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge
m5ad large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge
m5d large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge metal
m5dn large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge metal
m5n large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge metal
m5zn large xlarge 2xlarge 3xlarge 6xlarge 12xlarge metal
m6a large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge metal
m6g medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge metal
m6gd medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge metal
m6i large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge metal
m6id large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge metal
m6idn large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge metal
m6in large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge metal
m7a medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge metal-48xl
m7g medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge metal
m7gd medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge metal
m7i large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-24xl metal-48xl
m7i-flex large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge
m8a medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-24xl metal-48xl
m8azn medium large xlarge 3xlarge 6xlarge 12xlarge 24xlarge metal-12xl metal-24xl
m8g medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-24xl metal-48xl
m8gb medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-24xl metal-48xl
m8gd medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-24xl metal-48xl
m8gn medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-24xl metal-48xl
m8i large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge 96xlarge metal-48xl
m8i metal-96xl
m8i-flex large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge
m8ib large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge 96xlarge metal-48xl
m8ib metal-96xl
m8id large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge 96xlarge metal-48xl
m8id metal-96xl
m8idb large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge 96xlarge metal-48xl
m8idb metal-96xl
m8idn large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge 96xlarge metal-48xl
m8idn metal-96xl
m8in large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge 96xlarge metal-48xl
m8in metal-96xl
m8ine large xlarge 2xlarge 4xlarge 8xlarge 12xlarge
m9g medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-48xl
m9gd medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-48xl
mac-m3ultra metal
mac-m4 metal
mac-m4max metal
mac-m4pro metal
mac1 metal
mac2 metal
mac2-m1ultra metal
mac2-m2 metal
mac2-m2pro metal
p3dn 24xlarge
p4d 24xlarge
p4de 24xlarge
p5 4xlarge 48xlarge
p5e 48xlarge
p5en 48xlarge
p6-b200 48xlarge
p6-b300 48xlarge
r3 large xlarge 2xlarge 4xlarge 8xlarge
r4 large xlarge 2xlarge 4xlarge 8xlarge 16xlarge
r5 large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge metal
r5a large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge
r5ad large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge
r5b large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge metal
r5d large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge metal
r5dn large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge metal
r5n large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge metal
r6a large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge metal
r6g medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge metal
r6gd medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge metal
r6i large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge metal
r6id large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge metal
r6idn large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge metal
r6in large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge metal
r7a medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge metal-48xl
r7g medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge metal
r7gd medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge metal
r7i large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-24xl metal-48xl
r7iz large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 32xlarge metal-16xl metal-32xl
r8a medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-24xl metal-48xl
r8g medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-24xl metal-48xl
r8gb medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-24xl metal-48xl
r8gd medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-24xl metal-48xl
r8gn medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-24xl metal-48xl
r8i large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge 96xlarge metal-48xl
r8i metal-96xl
r8i-flex large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge
r8ib large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge 96xlarge metal-48xl
r8ib metal-96xl
r8id large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge 96xlarge metal-48xl
r8id metal-96xl
r8idb large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge 96xlarge metal-48xl
r8idb metal-96xl
r8idn large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge 96xlarge metal-48xl
r8idn metal-96xl
r8in large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge 96xlarge metal-48xl
r8in metal-96xl
r9g medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-48xl
r9gd medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-48xl
t1 micro
t2 nano micro small medium large xlarge 2xlarge
t3 nano micro small medium large xlarge 2xlarge
t3a nano micro small medium large xlarge 2xlarge
t4g nano micro small medium large xlarge 2xlarge
t8i nano micro small medium
trn1 2xlarge 32xlarge
trn1n 32xlarge
trn2 3xlarge 48xlarge
trn2u 48xlarge
u-3tb1 56xlarge
u-6tb1 56xlarge 112xlarge
u7i-12tb 224xlarge
u7i-6tb 112xlarge
u7i-8tb 112xlarge
u7in-16tb 224xlarge
u7in-24tb 224xlarge
u7in-32tb 224xlarge
vt1 3xlarge 6xlarge 24xlarge
x1 16xlarge 32xlarge
x1e xlarge 2xlarge 4xlarge 8xlarge 16xlarge 32xlarge
x2gd medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge metal
x2idn 16xlarge 24xlarge 32xlarge metal
x2iedn xlarge 2xlarge 4xlarge 8xlarge 16xlarge 24xlarge 32xlarge metal
x2iezn 2xlarge 4xlarge 6xlarge 8xlarge 12xlarge metal
x8aedz large xlarge 3xlarge 6xlarge 12xlarge 24xlarge metal-12xl metal-24xl
x8g medium large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge metal-24xl metal-48xl
x8i large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge 64xlarge 96xlarge metal-48xl
x8i metal-96xl
z1d large xlarge 2xlarge 3xlarge 6xlarge 12xlarge metal
"""

# The families whose types are arm64 (Graviton) in the same DescribeInstanceTypes data; every other is amd64.
_ARM64 = """
a1 c6g c6gd c6gn c7g c7gd c7gn c8g c8gb c8gd c8gn c9g c9gd g5g hpc7g i4g i8g i8ge im4gn is4gen m6g m6gd m7g
m7gd m8g m8gb m8gd m8gn m9g m9gd r6g r6gd r7g r7gd r8g r8gb r8gd r8gn r9g r9gd t4g x2gd x8g
"""
ARM64_FAMILIES = frozenset(_ARM64.split())


def _families() -> dict[str, frozenset[str]]:
    out: dict[str, frozenset[str]] = {}
    for line in _DATA.strip().splitlines():
        family, *sizes = line.split()
        out[family] = out.get(family, frozenset()) | frozenset(sizes)
    return out


FAMILY_SIZES = _families()
SIZES: frozenset[str] = frozenset(s for sizes in FAMILY_SIZES.values() for s in sizes)
# Karpenter's instance-category: the family's leading letters (m5 -> m, inf2 -> inf, u-6tb1 -> u).
CATEGORIES: frozenset[str] = frozenset(re.sub(r"[^a-z].*$", "", f) for f in FAMILY_SIZES)


def known_instance_type(name: str) -> bool:
    family, _, size = name.partition(".")
    return size in FAMILY_SIZES.get(family, frozenset())


def known_family(name: str) -> bool:
    return name in FAMILY_SIZES


def instance_type_names() -> list[str]:
    return sorted(f"{f}.{s}" for f, sizes in FAMILY_SIZES.items() for s in sizes)
