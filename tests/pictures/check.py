"""Checks the pictures of one plan against its JSON (accparc plan --format json).
Usage: check.py dot PLAN.json PLAN.dot PLAN.svg
       check.py html PLAN.json PLAN.html DOM.html PNG"""
import json
import re
import struct
import sys

errors = []


def check(cond, msg):
    if not cond:
        errors.append(msg)


plan = json.load(open(sys.argv[2]))
typed = [n for n in plan["nodes"] if "types" in n or "layouts" in n]
forward_total = sum(plan["device_forward_bytes"])

if sys.argv[1] == "dot":
    dot = open(sys.argv[3]).read()
    svg = open(sys.argv[4]).read()
    # Every layer and join with its state at every level.
    for n in typed:
        states = n.get("types") or n["layouts"]
        want = " ".join(f"L{l}:{s}" for l, s in enumerate(states))
        check(re.search(r'label="%s\\n%s\\n(join )?%s[\\"]' % (re.escape(n["name"]), re.escape(n["op"]),
                                                                re.escape(want)), dot),
              f"{n['name']}: no node labelled with {want}")
        check(n["name"] in svg, f"{n['name']} is not in the rendered SVG")
    check(dot.count("shape=hexagon") == sum(1 for n in typed if "layouts" in n),
          "joins are not all hexagons")
    # The bytes on the edges and reductions add up to the program's forward bytes.
    edge_bytes = [float(b) for b in re.findall(r'->[^\n]*\\n(\d+) B"', dot)]
    reduce_bytes = [float(b) for b in re.findall(r'partial sums: (\d+) B', dot)]
    check(abs(sum(edge_bytes) + sum(reduce_bytes) - forward_total) < 0.5,
          f"edges {sum(edge_bytes)} + reductions {sum(reduce_bytes)} != forward bytes {forward_total}")
    check(any(b > 0 for b in edge_bytes), "no edge moves any byte")
    n_edges = len(re.findall(r"^\s+\w+ -> \w+", dot, re.M))
    rendered = svg.count('class="edge"')
    check(rendered == n_edges, f"{rendered} edges rendered, {n_edges} in the DOT")
else:
    page = open(sys.argv[3]).read()
    dom = open(sys.argv[4]).read()
    png = open(sys.argv[5], "rb").read()
    check(not re.search(r"<script|<link|<img|\bsrc=|\bhref=|@import|url\(", page),
          "the page refers to something outside itself")
    check(not re.search(r"https?://(?!www\.w3\.org/2000/svg)", page), "the page names a URL")
    # Chromium parsed it: the table holds every layer with its types.
    for n in typed:
        states = n.get("types") or n["layouts"]
        check(re.search(re.escape("<tr><td>%s</td><td>%s</td>" % (n["name"], n["op"])) +
                        "".join(r'<td class="[a-z0-9]+">%s</td>' % re.escape(s) for s in states),
                        dom), f"{n['name']}: no table row with types {states}")
    for d in range(plan["n_devices"]):
        check(f"device {d} (" in dom, f"device {d} is not in the charts")
        check(f">{plan['device_forward_bytes'][d]} B<" in dom, f"device {d}'s forward bytes are not shown")
        check(f">{plan['device_step_bytes'][d]} B<" in dom, f"device {d}'s step bytes are not shown")
    check(dom.count("<svg") >= 3, "fewer than three inline SVG charts")
    check(png[:8] == b"\x89PNG\r\n\x1a\n", "the screenshot is not a PNG")
    width, height = struct.unpack(">II", png[16:24])
    check(width > 0 and height > 0 and len(png) > 20000,
          f"the screenshot looks empty ({width}x{height}, {len(png)} bytes)")
if errors:
    print("\n".join(errors))
    sys.exit(1)
