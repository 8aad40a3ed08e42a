"""The skills that ship with shellgate, referenced by id as OpenAI's
curated ones are, run on real data in the `debian-12` image (pandas,
matplotlib, reportlab, python-docx): the numbers they print are checked
against the data, the files they write are opened."""

import csv
import io
import json
import random
import struct
import zipfile
from collections import defaultdict

import pytest

from conftest import debian_server, exec_commands

ANALYST = "/mnt/skills/spreadsheet-analyst/scripts/analyze.py"
WRITER = "/mnt/skills/report-writer/scripts/render.py"


# The module's server is its own (a cluster of its own in cluster mode, run
# apart from the session's: one cluster at a time).
pytestmark = pytest.mark.fresh_server


@pytest.fixture(scope="module")
def debian(upstream):
    with debian_server(upstream) as server:
        yield server


def sales_csv() -> bytes:
    """A year of sales: four regions, three products, 240 rows."""
    rng = random.Random(7)
    prices = {"Widget": 2.5, "Gadget": 10.0, "Gizmo": 4.25}
    regions, products = ["North", "South", "East", "West"], list(prices)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["date", "region", "product", "units", "unit_price", "revenue"])
    for i in range(240):
        product = products[i % 3]
        units = rng.randint(1, 50)
        writer.writerow([f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}", regions[i % 4], product, units,
                         prices[product], round(units * prices[product], 2)])
    return out.getvalue().encode()


def rows():
    return list(csv.DictReader(io.StringIO(sales_csv().decode())))


def png_size(data: bytes):
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    return struct.unpack(">II", data[16:24])


def upload(client, container_id, name, data):
    client.containers.files.create(container_id, file=(name, data))


def download(client, container_id, path):
    listing = client.containers.files.list(container_id, limit=100)
    file_id = next(f.id for f in listing.data if f.path == path)
    return client.containers.files.content.retrieve(file_id, container_id=container_id).read()


@pytest.fixture(scope="module")
def container(debian):
    client = debian.client()
    made = client.containers.create(name="curated", skills=[
        {"type": "skill_reference", "skill_id": "shellgate-spreadsheet-analyst"},
        {"type": "skill_reference", "skill_id": "shellgate-report-writer", "version": "latest"}])
    assert made.image == "debian-12"
    upload(client, made.id, "sales.csv", sales_csv())
    yield client, made.id
    client.containers.delete(made.id)


def test_the_analyst_summarizes_every_column(container):
    client, cid = container
    out = exec_commands(client, cid, [f"python3 {ANALYST} summary /mnt/data/sales.csv --json"])["output"][0]
    assert out["outcome"] == {"type": "exit", "exit_code": 0}, out
    summary = json.loads(out["stdout"])
    assert summary["rows"] == 240
    columns = {c["column"]: c for c in summary["columns"]}
    revenue = [float(r["revenue"]) for r in rows()]
    assert abs(columns["revenue"]["sum"] - sum(revenue)) < 1e-6
    assert abs(columns["revenue"]["mean"] - sum(revenue) / 240) < 1e-6
    assert columns["revenue"]["max"] == max(revenue) and columns["revenue"]["min"] == min(revenue)
    assert columns["units"]["sum"] == sum(int(r["units"]) for r in rows())
    assert sorted(k for k, _ in columns["region"]["top"]) == ["East", "North", "South", "West"]
    assert columns["region"]["unique"] == 4 and columns["region"]["missing"] == 0
    text = exec_commands(client, cid, [f"python3 {ANALYST} summary /mnt/data/sales.csv"])["output"][0]["stdout"]
    assert text.startswith("/mnt/data/sales.csv: 240 rows x 6 columns")


def test_the_analyst_pivots(container):
    client, cid = container
    out = exec_commands(client, cid, [
        f"python3 {ANALYST} pivot /mnt/data/sales.csv --index region --columns product --values revenue "
        f"--agg sum --totals --json --out /mnt/data/pivot.xlsx"])["output"][0]
    assert out["outcome"]["exit_code"] == 0, out
    pivot = json.loads(out["stdout"].split("\nwrote ")[0])
    expected = defaultdict(float)
    for r in rows():
        expected[(r["region"], r["product"])] += float(r["revenue"])
    for (region, product), total in expected.items():
        assert abs(pivot[region][product] - total) < 1e-6, (region, product)
    assert abs(pivot["Total"]["Total"] - sum(expected.values())) < 1e-6
    # The table was written too, as a real workbook.
    workbook = download(client, cid, "/mnt/data/pivot.xlsx")
    with zipfile.ZipFile(io.BytesIO(workbook)) as archive:
        assert "xl/worksheets/sheet1.xml" in archive.namelist()
    counts = json.loads(exec_commands(client, cid, [
        f"python3 {ANALYST} pivot /mnt/data/sales.csv --index product --agg count --json"])["output"][0]["stdout"])
    assert {k: v["rows"] for k, v in counts.items()} == {"Gadget": 80, "Gizmo": 80, "Widget": 80}


def test_the_analyst_draws_charts_to_mnt_data(container):
    client, cid = container
    for kind, extra in [("bar", "--x region --y revenue"), ("line", "--x date --y units"),
                        ("hist", "--x units"), ("scatter", "--x units --y revenue"), ("pie", "--x product --y revenue")]:
        out = exec_commands(client, cid, [
            f"python3 {ANALYST} chart /mnt/data/sales.csv --kind {kind} {extra} --out /mnt/data/{kind}.png"])
        result = out["output"][0]
        assert result["outcome"]["exit_code"] == 0, result
        assert result["stdout"] == f"wrote /mnt/data/{kind}.png\n"
        assert png_size(download(client, cid, f"/mnt/data/{kind}.png")) == (800, 500)
    bad = exec_commands(client, cid, [f"python3 {ANALYST} chart /mnt/data/sales.csv --x nope --out /mnt/data/x.png"])
    assert bad["output"][0]["outcome"]["exit_code"] == 2
    assert "no column 'nope'" in bad["output"][0]["stderr"]


REPORT = """# Quarterly sales

Revenue came to **{total:.2f}** over the year; *West* led.

## By region

| Region | Revenue |
|--------|--------:|
{table}

- Restock gadgets
- Review pricing

```
python3 analyze.py pivot sales.csv --index region
```

![Revenue by region](/mnt/data/bar.png)
"""


def test_the_report_writer_makes_html_pdf_and_docx(container):
    client, cid = container
    by_region = defaultdict(float)
    for r in rows():
        by_region[r["region"]] += float(r["revenue"])
    table = "\n".join(f"| {k} | {v:.2f} |" for k, v in sorted(by_region.items()))
    report = REPORT.format(total=sum(by_region.values()), table=table)
    upload(client, cid, "report.md", report.encode())
    # The chart the report embeds (the analyst's bar chart).
    exec_commands(client, cid, [f"python3 {ANALYST} chart /mnt/data/sales.csv --kind bar --x region --y revenue "
                                f"--out /mnt/data/bar.png"])
    out = exec_commands(client, cid, [f"python3 {WRITER} /mnt/data/report.md --to html,pdf,docx"])["output"][0]
    assert out["outcome"]["exit_code"] == 0, out
    assert out["stdout"].split() == ["wrote", "/mnt/data/report.html", "wrote", "/mnt/data/report.pdf",
                                     "wrote", "/mnt/data/report.docx"]

    page = download(client, cid, "/mnt/data/report.html").decode()
    assert "<title>Quarterly sales</title>" in page and "<h1>Quarterly sales</h1>" in page
    assert f"<strong>{sum(by_region.values()):.2f}</strong>" in page and "<em>West</em>" in page
    assert page.count("<tr>") == 5 and "<td>West</td>" in page
    assert "<li>Restock gadgets</li>" in page and "data:image/png;base64," in page

    pdf = download(client, cid, "/mnt/data/report.pdf")
    assert pdf.startswith(b"%PDF-")
    text = exec_commands(client, cid, [
        "python3 -c \"import pypdf; r = pypdf.PdfReader('/mnt/data/report.pdf'); "
        "print(''.join(p.extract_text() for p in r.pages))\""])["output"][0]["stdout"]
    assert "Quarterly sales" in text and f"{by_region['West']:.2f}" in text and "Restock gadgets" in text

    docx = download(client, cid, "/mnt/data/report.docx")
    with zipfile.ZipFile(io.BytesIO(docx)) as archive:
        document = archive.read("word/document.xml").decode()
        assert any(n.startswith("word/media/") and n.endswith(".png") for n in archive.namelist())
    for fragment in ["Quarterly sales", "By region", f"{by_region['North']:.2f}", "Review pricing"]:
        assert fragment in document, fragment
    assert "<w:tbl>" in document

    missing = exec_commands(client, cid, [f"python3 {WRITER} /mnt/data/nothing.md"])["output"][0]
    assert missing["outcome"]["exit_code"] == 2 and "does not exist" in missing["stderr"]


def hello_wheel() -> bytes:
    """A pure-Python wheel with a console script, made by hand (pip needs
    no network nor build step for it)."""
    import base64
    import hashlib
    files = {
        "hello_sg/__init__.py": b"def main():\n    print('hello from a user install')\n",
        "hello_sg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: hello-sg\nVersion: 1.0\n",
        "hello_sg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        "hello_sg-1.0.dist-info/entry_points.txt": b"[console_scripts]\nhello-sg = hello_sg:main\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("hello_sg-1.0.dist-info/RECORD,,")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr("hello_sg-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return buffer.getvalue()


def hello_npm_package() -> bytes:
    import tarfile
    files = {
        "package/package.json": json.dumps({"name": "hello-sg", "version": "1.0.0",
                                            "bin": {"hello-sg-js": "cli.js"}}).encode(),
        "package/cli.js": b"#!/usr/bin/env node\nconsole.log('hello from npm -g');\n",
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_pip_and_npm_install_work_as_the_unprivileged_user(container):
    """No PEP 668 wall and no root needed: installs land in ~/.local, on PATH."""
    client, cid = container
    upload(client, cid, "hello_sg-1.0-py3-none-any.whl", hello_wheel())
    upload(client, cid, "hello-sg-1.0.0.tgz", hello_npm_package())
    out = exec_commands(client, cid, [
        "pip install --no-index --quiet /mnt/data/hello_sg-1.0-py3-none-any.whl && hello-sg",
        "npm install -g --offline --no-audit --no-fund /mnt/data/hello-sg-1.0.0.tgz >/dev/null && hello-sg-js",
        "id -u; command -v hello-sg hello-sg-js",
    ], timeout_ms=120_000)["output"]
    assert out[0]["stdout"].endswith("hello from a user install\n"), out[0]
    assert out[1]["stdout"] == "hello from npm -g\n", out[1]
    uid, *paths = out[2]["stdout"].split()
    assert uid != "0" and all(p.startswith("/home/user/.local/bin/") for p in paths), out[2]
