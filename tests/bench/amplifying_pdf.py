#!/usr/bin/env python3
"""Writes a small PDF whose pages all draw one content stream: a few hundred KB on disk that
expand to megabytes of text. Standard library only.

    tests/bench/amplifying_pdf.py OUT.pdf [PAGES] [LINES]

PAGES (default 1999, under the 2,000-page limit) pages share one FlateDecode stream of LINES
(default 100) lines of 80 characters. Used to measure how long a sync takes on it
(`warden kb add` + `warden kb sync`, see tests/bench/README.md).
"""
import sys
import zlib


def main():
    if len(sys.argv) not in (2, 3, 4):
        raise SystemExit(__doc__)
    out = sys.argv[1]
    pages = int(sys.argv[2]) if len(sys.argv) > 2 else 1999
    lines = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    text = "".join(
        f"BT /F1 9 Tf 36 {760 - 7 * i} Td (line {i:03} of the shared stream: restart the "
        f"service and check the disk usage.) Tj ET\n"
        for i in range(lines)
    ).encode()
    stream = zlib.compress(text, 9)
    first_page = 5
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Count %d /Kids [%s] >>" % (
            pages, b" ".join(b"%d 0 R" % (first_page + i) for i in range(pages))),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    for _ in range(pages):
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents 4 0 R >>")
    pdf = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(pdf))
        pdf += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(pdf)
    pdf += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        pdf += b"%010d 00000 n \n" % offset
    pdf += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, xref)
    with open(out, "wb") as f:
        f.write(pdf)
    print(f"{out}: {len(pdf)} bytes, {pages} pages, {len(text) * pages} bytes of page text")


if __name__ == "__main__":
    main()
