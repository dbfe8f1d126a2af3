"""Regenerates the office/e-book samples with their real producers.

Each file carries one unique two-word phrase that the extractor tests look for, and
(except the RTF) a title in its metadata that the title tests look for.
Needs: pip install odfpy openpyxl python-pptx ebooklib reportlab; LibreOffice (soffice)
for RTF.
Run from the repository's top: python3 tests/make_samples.py (writes samples/formats/,
and tests/fixtures/ for the files that are no sample); name samples (odt ods odp epub
xlsx pptx rtf pdf) to regenerate only those.
"""

import os
import subprocess
import sys

from ebooklib import epub
from odf.dc import Title
from odf.opendocument import (
    OpenDocumentPresentation,
    OpenDocumentSpreadsheet,
    OpenDocumentText,
)
from odf.draw import Frame, Page, TextBox
from odf.style import MasterPage, PageLayout
from odf.table import Table, TableCell, TableRow
from odf.text import H, P
from openpyxl import Workbook
from pptx import Presentation
from pptx.util import Inches
from reportlab.pdfgen import canvas

# Files for the extractor's tests that are not samples: the command line's tests count
# and search every file under samples/.
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def odt():
    doc = OpenDocumentText()
    doc.meta.addElement(Title(text="Field notes: herons"))
    doc.text.addElement(H(outlinelevel=1, text="Field notes"))
    doc.text.addElement(P(text="We saw a cobalt heron by the weir."))
    doc.text.addElement(P(text="Second paragraph."))
    doc.save("notes.odt")


def ods():
    doc = OpenDocumentSpreadsheet()
    doc.meta.addElement(Title(text="Workshop inventory"))
    table = Table(name="Inventory")
    for left, right in [("item", "count"), ("juniper anvil", "3")]:
        row = TableRow()
        for value in (left, right):
            cell = TableCell()
            cell.addElement(P(text=value))
            row.addElement(cell)
        table.addElement(row)
    doc.spreadsheet.addElement(table)
    doc.save("inventory.ods")


def odp():
    doc = OpenDocumentPresentation()
    doc.meta.addElement(Title(text="Falcon sightings \u2013 2026"))
    layout = PageLayout(name="Layout")
    doc.automaticstyles.addElement(layout)
    master = MasterPage(name="Default", pagelayoutname=layout)
    doc.masterstyles.addElement(master)
    page = Page(masterpagename=master)
    frame = Frame(width="20cm", height="3cm", x="1cm", y="1cm")
    box = TextBox()
    box.addElement(P(text="Slide about the marble falcon"))
    frame.addElement(box)
    page.addElement(frame)
    doc.presentation.addElement(page)
    doc.save("slides.odp")


def epub_book():
    book = epub.EpubBook()
    book.set_identifier("leasehold-sample")
    book.set_title("Sample book")
    book.set_language("en")
    chapter = epub.EpubHtml(title="One", file_name="one.xhtml", lang="en")
    chapter.content = (
        "<h1>Chapter one</h1><p>The indigo compass pointed north.</p>"
        "<script>forbidden()</script>"
    )
    book.add_item(chapter)
    book.toc = [chapter]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", chapter]
    epub.write_epub("book.epub", book)


def xlsx():
    wb = Workbook()
    wb.properties.title = "Walnut ledger"
    sheet = wb.active
    sheet.title = "Ledger"
    sheet.append(["name", "amount"])
    sheet.append(["walnut glacier", 42])
    wb.create_sheet("Second").append(["plain", 1.5])
    wb.save("ledger.xlsx")


def pptx():
    prs = Presentation()
    prs.core_properties.title = "Quarterly review deck"
    slide = prs.slides.add_slide(prs.slide_layouts[5])
    slide.shapes.title.text = "Quarterly review"
    box = slide.shapes.add_textbox(Inches(1), Inches(2), Inches(6), Inches(1))
    box.text_frame.text = "The ivory pelican has landed"
    prs.save("deck.pptx")


def pdf():
    # A title beyond Latin-1, which reportlab writes as UTF-16BE after a byte-order mark;
    # `invariant` keeps the file the same from run to run.
    os.makedirs(FIXTURES, exist_ok=True)
    c = canvas.Canvas(os.path.join(FIXTURES, "tides.pdf"), invariant=1)
    c.setTitle("Tides of the \u00c5land sea \u2013 \u6f6e\u6c50")
    c.setAuthor("leasehold sample generator")
    c.drawString(72, 720, "The saffron lagoon rose at dawn.")
    c.save()


def rtf():
    # LibreOffice writes the RTF from the ODT above, so the RTF is a real producer's.
    with open("memo.txt", "w", encoding="utf-8") as f:
        f.write("Memo: the crimson tundra caf\u00e9 opens soon.\n")
    subprocess.run(
        ["soffice", "--headless", "--convert-to", "rtf", "memo.txt"], check=True
    )
    os.remove("memo.txt")


if __name__ == "__main__":
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "samples", "formats")
    os.makedirs(out, exist_ok=True)
    os.chdir(out)
    makers = {
        "odt": odt,
        "ods": ods,
        "odp": odp,
        "epub": epub_book,
        "xlsx": xlsx,
        "pptx": pptx,
        "rtf": rtf,
        "pdf": pdf,
    }
    for name in sys.argv[1:] or list(makers):
        makers[name]()
