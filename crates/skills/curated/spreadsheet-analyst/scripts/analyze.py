#!/usr/bin/env python3
"""Summaries, pivot tables and charts of tabular files (the
spreadsheet-analyst skill). Run with --help for the commands."""

import argparse
import json
import math
import sys
from pathlib import Path

AGGREGATIONS = ("sum", "mean", "count", "min", "max", "median")


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def load(path, sheet=None):
    try:
        import pandas as pd
    except ImportError:
        fail("pandas is not installed in this container (use the debian-12 image, or pip install pandas)")
    file = Path(path)
    if not file.is_file():
        fail(f"{path} does not exist")
    suffix = file.suffix.lower()
    if suffix in (".xlsx", ".xlsm", ".xls"):
        return pd.read_excel(file, sheet_name=sheet if sheet is not None else 0)
    if suffix == ".json":
        return pd.read_json(file)
    if suffix in (".tsv", ".tab"):
        return pd.read_csv(file, sep="\t")
    # CSV with a sniffed delimiter (comma, semicolon, tab, pipe).
    return pd.read_csv(file, sep=None, engine="python")


def column(frame, name):
    if name not in frame.columns:
        fail(f"no column {name!r}; columns: {', '.join(map(str, frame.columns))}")
    return name


def plain(value):
    """A value JSON can carry (numpy scalars, NaN as null)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value


def summary(args):
    import pandas as pd

    frame = load(args.file, args.sheet)
    columns = []
    for name in frame.columns:
        series = frame[name]
        entry = {
            "column": str(name),
            "dtype": str(series.dtype),
            "non_null": int(series.notna().sum()),
            "missing": int(series.isna().sum()),
            "unique": int(series.nunique()),
        }
        if pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series):
            described = series.describe()
            for key in ("mean", "std", "min", "25%", "50%", "75%", "max"):
                entry[key] = plain(round(float(described[key]), 6)) if key in described else None
            entry["sum"] = plain(round(float(series.sum()), 6))
        else:
            top = series.astype(str).value_counts().head(5)
            entry["top"] = [[str(k), int(v)] for k, v in top.items()]
        columns.append(entry)
    result = {"file": args.file, "rows": int(len(frame)), "columns": columns}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.file}: {len(frame)} rows x {len(frame.columns)} columns")
    for entry in columns:
        line = f"- {entry['column']} ({entry['dtype']}): {entry['non_null']} values, {entry['missing']} missing"
        if "mean" in entry:
            line += (f"; sum {entry['sum']:g}, mean {entry['mean']:g}, min {entry['min']:g}, "
                     f"median {entry['50%']:g}, max {entry['max']:g}")
        else:
            line += f", {entry['unique']} distinct; top: " + ", ".join(f"{k} ({v})" for k, v in entry["top"])
        print(line)


def pivot(args):
    frame = load(args.file, args.sheet)
    index = column(frame, args.index)
    columns = column(frame, args.columns) if args.columns else None
    values = column(frame, args.values) if args.values else None
    if values is None and args.agg != "count":
        fail("--values is required unless --agg count")
    if values is None:
        # Counting rows: a column of ones, summed (works for any index).
        frame = frame.assign(rows=1)
        values, args.agg = "rows", "sum"
    table = frame.pivot_table(
        index=index,
        columns=columns,
        values=values,
        aggfunc=args.agg,
        fill_value=0,
        margins=args.totals,
        margins_name="Total",
    )
    if hasattr(table, "columns") and getattr(table.columns, "nlevels", 1) > 1:
        table.columns = [" ".join(str(p) for p in c if str(p)) for c in table.columns]
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix.lower() == ".xlsx":
            table.to_excel(out)
        else:
            table.to_csv(out)
    if args.json:
        frame_out = table if hasattr(table, "columns") else table.to_frame()
        records = {str(k): {str(c): plain(v) for c, v in row.items()} for k, row in frame_out.iterrows()}
        print(json.dumps(records, indent=2))
    else:
        print(table.to_string())
    if args.out:
        print(f"wrote {args.out}")


def chart(args):
    try:
        import matplotlib
    except ImportError:
        fail("matplotlib is not installed in this container (use the debian-12 image)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = load(args.file, args.sheet)
    figure, axes = plt.subplots(figsize=(args.width, args.height), dpi=100)
    kind = args.kind
    if kind == "hist":
        series = frame[column(frame, args.x)].dropna()
        axes.hist(series, bins=args.bins, color="#4C72B0", edgecolor="white")
        axes.set_xlabel(args.x)
        axes.set_ylabel("count")
    elif kind == "scatter":
        x, y = column(frame, args.x), column(frame, args.y)
        axes.scatter(frame[x], frame[y], s=12, alpha=0.7)
        axes.set_xlabel(x)
        axes.set_ylabel(y)
    else:
        x = column(frame, args.x)
        if args.y:
            grouped = frame.groupby(x, sort=kind == "line")[column(frame, args.y)].agg(args.agg)
        else:
            grouped = frame.groupby(x, sort=kind == "line").size()
        if kind == "bar":
            grouped = grouped.sort_values(ascending=False)
            axes.bar([str(i) for i in grouped.index], grouped.values, color="#4C72B0")
            axes.set_ylabel(f"{args.agg} of {args.y}" if args.y else "count")
            axes.tick_params(axis="x", labelrotation=30)
        elif kind == "line":
            axes.plot(grouped.index, grouped.values, marker="o")
            axes.set_ylabel(f"{args.agg} of {args.y}" if args.y else "count")
        elif kind == "pie":
            axes.pie(grouped.values, labels=[str(i) for i in grouped.index], autopct="%1.1f%%")
            axes.axis("equal")
        axes.set_xlabel(x if kind != "pie" else "")
    axes.set_title(args.title or f"{kind} of {args.y or args.x}")
    figure.tight_layout()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, format="png")
    print(f"wrote {out}")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    def common(sub):
        sub.add_argument("file")
        sub.add_argument("--sheet", help="the Excel sheet (the first by default)")

    one = commands.add_parser("summary", help="describe every column")
    common(one)
    one.add_argument("--json", action="store_true")
    one.set_defaults(run=summary)

    two = commands.add_parser("pivot", help="a pivot table")
    common(two)
    two.add_argument("--index", required=True)
    two.add_argument("--columns")
    two.add_argument("--values")
    two.add_argument("--agg", choices=AGGREGATIONS, default="sum")
    two.add_argument("--totals", action="store_true", help="add a Total row and column")
    two.add_argument("--out", help="also write the table (.csv or .xlsx)")
    two.add_argument("--json", action="store_true")
    two.set_defaults(run=pivot)

    three = commands.add_parser("chart", help="a PNG chart")
    common(three)
    three.add_argument("--kind", choices=("bar", "line", "hist", "scatter", "pie"), default="bar")
    three.add_argument("--x", required=True)
    three.add_argument("--y")
    three.add_argument("--agg", choices=AGGREGATIONS, default="sum")
    three.add_argument("--bins", type=int, default=20)
    three.add_argument("--title")
    three.add_argument("--width", type=float, default=8)
    three.add_argument("--height", type=float, default=5)
    three.add_argument("--out", required=True)
    three.set_defaults(run=chart)

    args = parser.parse_args()
    if args.command == "chart" and args.kind == "scatter" and not args.y:
        fail("a scatter chart needs --y")
    args.run(args)


if __name__ == "__main__":
    main()
