#!/usr/bin/env python3
"""Renders a Markdown report as HTML, PDF and DOCX (the report-writer
skill). One parser reads the Markdown into blocks; each format renders the
same blocks, so the three documents say the same thing."""

import argparse
import base64
import html
import re
import sys
from pathlib import Path

INLINE = re.compile(r"(\*\*[^*]+\*\*|\*[^*\s][^*]*\*|`[^`]+`)")


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


# --- Markdown to blocks -------------------------------------------------------


def spans(text):
    """Inline text as (kind, text) spans: plain, bold, italic, code."""
    out = []
    for piece in INLINE.split(text):
        if not piece:
            continue
        if piece.startswith("**") and piece.endswith("**") and len(piece) > 4:
            out.append(("bold", piece[2:-2]))
        elif piece.startswith("`") and piece.endswith("`") and len(piece) > 2:
            out.append(("code", piece[1:-1]))
        elif piece.startswith("*") and piece.endswith("*") and len(piece) > 2:
            out.append(("italic", piece[1:-1]))
        else:
            out.append(("plain", piece))
    return out


def table_row(line):
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def parse(text):
    """Blocks: ("heading", level, text), ("paragraph", text), ("list",
    ordered, [items]), ("code", text), ("table", header, rows), ("quote",
    text), ("rule",), ("image", caption, path)."""
    lines = text.replace("\r\n", "\n").split("\n")
    blocks, paragraph, i = [], [], 0

    def flush():
        if paragraph:
            blocks.append(("paragraph", " ".join(s.strip() for s in paragraph)))
            paragraph.clear()

    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("```"):
            flush()
            body, i = [], i + 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                body.append(lines[i])
                i += 1
            blocks.append(("code", "\n".join(body)))
            i += 1
            continue
        heading = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        image = re.match(r"^!\[([^\]]*)\]\(([^)\s]+)\)\s*$", stripped)
        if not stripped:
            flush()
        elif heading:
            flush()
            blocks.append(("heading", len(heading.group(1)), heading.group(2)))
        elif re.match(r"^(-{3,}|\*{3,}|_{3,})$", stripped):
            flush()
            blocks.append(("rule",))
        elif image:
            flush()
            blocks.append(("image", image.group(1), image.group(2)))
        elif stripped.startswith("|") and i + 1 < len(lines) and re.match(r"^\s*\|?[\s:|-]+\|?\s*$", lines[i + 1]) \
                and "-" in lines[i + 1]:
            flush()
            header, rows, i = table_row(line), [], i + 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append(table_row(lines[i]))
                i += 1
            blocks.append(("table", header, rows))
            continue
        elif re.match(r"^\s*([-*+]|\d+[.)])\s+", line):
            flush()
            ordered = bool(re.match(r"^\s*\d+[.)]\s+", line))
            items = []
            while i < len(lines) and re.match(r"^\s*([-*+]|\d+[.)])\s+", lines[i]):
                items.append(re.sub(r"^\s*([-*+]|\d+[.)])\s+", "", lines[i]).strip())
                i += 1
            blocks.append(("list", ordered, items))
            continue
        elif stripped.startswith(">"):
            flush()
            quote = []
            while i < len(lines) and lines[i].strip().startswith(">"):
                quote.append(lines[i].strip()[1:].strip())
                i += 1
            blocks.append(("quote", " ".join(quote)))
            continue
        else:
            paragraph.append(line)
        i += 1
    flush()
    return blocks


# --- HTML ---------------------------------------------------------------------

STYLE = """body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:48rem;margin:2rem auto;
padding:0 1rem;line-height:1.5;color:#222}table{border-collapse:collapse;margin:1rem 0}th,td{border:1px solid #ccc;
padding:.3rem .6rem;text-align:left}th{background:#f3f3f3}pre{background:#f6f8fa;padding:.8rem;overflow-x:auto}
code{font-family:Menlo,Consolas,monospace;font-size:.9em}blockquote{border-left:4px solid #ddd;margin:0;
padding-left:1rem;color:#555}img{max-width:100%}figcaption{color:#666;font-size:.9em}"""


def html_inline(text):
    tags = {"bold": "strong", "italic": "em", "code": "code"}
    return "".join(html.escape(t) if k == "plain" else f"<{tags[k]}>{html.escape(t)}</{tags[k]}>"
                   for k, t in spans(text))


def to_html(blocks, title, base):
    body = []
    for block in blocks:
        kind = block[0]
        if kind == "heading":
            body.append(f"<h{block[1]}>{html_inline(block[2])}</h{block[1]}>")
        elif kind == "paragraph":
            body.append(f"<p>{html_inline(block[1])}</p>")
        elif kind == "list":
            tag = "ol" if block[1] else "ul"
            body.append(f"<{tag}>" + "".join(f"<li>{html_inline(i)}</li>" for i in block[2]) + f"</{tag}>")
        elif kind == "code":
            body.append(f"<pre><code>{html.escape(block[1])}</code></pre>")
        elif kind == "table":
            head = "".join(f"<th>{html_inline(c)}</th>" for c in block[1])
            rows = "".join("<tr>" + "".join(f"<td>{html_inline(c)}</td>" for c in r) + "</tr>" for r in block[2])
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif kind == "quote":
            body.append(f"<blockquote>{html_inline(block[1])}</blockquote>")
        elif kind == "rule":
            body.append("<hr>")
        elif kind == "image":
            path = image_path(block[2], base)
            mime = "image/png" if path.suffix.lower() == ".png" else "image/jpeg"
            data = base64.b64encode(path.read_bytes()).decode()
            body.append(f'<figure><img src="data:{mime};base64,{data}" alt="{html.escape(block[1])}">'
                        f"<figcaption>{html.escape(block[1])}</figcaption></figure>")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def image_path(reference, base):
    path = Path(reference)
    if not path.is_absolute():
        path = base / path
    if not path.is_file():
        fail(f"the image {reference} does not exist")
    return path


# --- PDF (reportlab) ------------------------------------------------------------


def to_pdf(blocks, title, base, out):
    try:
        from reportlab.lib import colors
        from reportlab.lib.pagesizes import A4
        from reportlab.lib.styles import getSampleStyleSheet
        from reportlab.lib.units import cm
        from reportlab.platypus import (HRFlowable, Image, ListFlowable, ListItem, Paragraph, Preformatted,
                                        SimpleDocTemplate, Spacer, Table, TableStyle)
    except ImportError:
        fail("PDF needs reportlab (the debian-12 image has it; or pip install reportlab)")
    styles = getSampleStyleSheet()

    def markup(text):
        tags = {"bold": "b", "italic": "i", "code": "font face='Courier'"}
        out = []
        for k, t in spans(text):
            escaped = html.escape(t, quote=False)
            out.append(escaped if k == "plain" else f"<{tags[k]}>{escaped}</{tags[k].split()[0]}>")
        return "".join(out)

    story = []
    width = A4[0] - 4 * cm
    for block in blocks:
        kind = block[0]
        if kind == "heading":
            story.append(Paragraph(markup(block[2]), styles[f"Heading{min(block[1], 6)}"]))
        elif kind == "paragraph":
            story.append(Paragraph(markup(block[1]), styles["BodyText"]))
        elif kind == "list":
            items = [ListItem(Paragraph(markup(i), styles["BodyText"])) for i in block[2]]
            story.append(ListFlowable(items, bulletType="1" if block[1] else "bullet", leftIndent=14))
        elif kind == "code":
            story.append(Preformatted(block[1], styles["Code"]))
        elif kind == "table":
            data = [[Paragraph(markup(c), styles["BodyText"]) for c in row] for row in [block[1]] + block[2]]
            table = Table(data, repeatRows=1, hAlign="LEFT")
            table.setStyle(TableStyle([("GRID", (0, 0), (-1, -1), 0.5, colors.grey),
                                       ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#f0f0f0"))]))
            story.append(table)
        elif kind == "quote":
            story.append(Paragraph(f"<i>{markup(block[1])}</i>", styles["BodyText"]))
        elif kind == "rule":
            story.append(HRFlowable(width="100%"))
        elif kind == "image":
            path = image_path(block[2], base)
            picture = Image(str(path))
            scale = min(1.0, width / picture.imageWidth)
            picture.drawWidth, picture.drawHeight = picture.imageWidth * scale, picture.imageHeight * scale
            story.append(picture)
            if block[1]:
                story.append(Paragraph(f"<i>{html.escape(block[1])}</i>", styles["BodyText"]))
        story.append(Spacer(1, 4))
    document = SimpleDocTemplate(str(out), pagesize=A4, title=title, leftMargin=2 * cm, rightMargin=2 * cm)
    document.build(story)


# --- DOCX (python-docx) -----------------------------------------------------------


def to_docx(blocks, title, base, out):
    try:
        import docx
        from docx.shared import Cm
    except ImportError:
        fail("DOCX needs python-docx (the debian-12 image has it; or pip install python-docx)")
    document = docx.Document()
    document.core_properties.title = title

    def runs(paragraph, text):
        for k, t in spans(text):
            run = paragraph.add_run(t)
            run.bold = k == "bold"
            run.italic = k == "italic"
            if k == "code":
                run.font.name = "Courier New"

    for block in blocks:
        kind = block[0]
        if kind == "heading":
            runs(document.add_heading(level=min(block[1], 9)), block[2])
        elif kind == "paragraph":
            runs(document.add_paragraph(), block[1])
        elif kind == "list":
            for item in block[2]:
                runs(document.add_paragraph(style="List Number" if block[1] else "List Bullet"), item)
        elif kind == "code":
            run = document.add_paragraph().add_run(block[1])
            run.font.name = "Courier New"
        elif kind == "table":
            table = document.add_table(rows=1 + len(block[2]), cols=len(block[1]))
            table.style = "Table Grid"
            for r, row in enumerate([block[1]] + block[2]):
                for c, cell in enumerate(row[: len(block[1])]):
                    runs(table.cell(r, c).paragraphs[0], cell)
                    if r == 0:
                        for run in table.cell(r, c).paragraphs[0].runs:
                            run.bold = True
        elif kind == "quote":
            runs(document.add_paragraph(style="Quote"), block[1])
        elif kind == "rule":
            document.add_paragraph("_" * 40)
        elif kind == "image":
            document.add_picture(str(image_path(block[2], base)), width=Cm(15))
            if block[1]:
                document.add_paragraph(block[1], style="Caption")
    document.save(str(out))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("markdown", help="the report, as a Markdown file")
    parser.add_argument("--to", default="html,pdf,docx", help="formats, comma-separated: html, pdf, docx")
    parser.add_argument("--title", help="the document title (default: the first heading)")
    parser.add_argument("--out-dir", default="/mnt/data")
    args = parser.parse_args()
    source = Path(args.markdown)
    if not source.is_file():
        fail(f"{source} does not exist")
    formats = [f.strip().lower() for f in args.to.split(",") if f.strip()]
    unknown = [f for f in formats if f not in ("html", "pdf", "docx")]
    if unknown or not formats:
        fail(f"unknown format(s) {', '.join(unknown) or '(none)'}: use html, pdf, docx")
    blocks = parse(source.read_text(encoding="utf-8"))
    title = args.title or next((b[2] for b in blocks if b[0] == "heading"), source.stem)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for fmt in formats:
        out = out_dir / f"{source.stem}.{fmt}"
        if fmt == "html":
            out.write_text(to_html(blocks, title, source.parent), encoding="utf-8")
        elif fmt == "pdf":
            to_pdf(blocks, title, source.parent, out)
        else:
            to_docx(blocks, title, source.parent, out)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
