"""The book's Sphinx extension for accessibility (book/_ext/accessible.py), without building the book:
it reads plotly's HTML back into the figure, and its fixes of the theme's markup hold."""
import importlib.util
import pathlib

import plotly.graph_objects as go
import plotly.io as pio

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("accessible", ROOT / "book" / "_ext" / "accessible.py")
accessible = importlib.util.module_from_spec(spec)
spec.loader.exec_module(accessible)

# The theme's markup as pydata-sphinx-theme 0.17 writes it (one line of each element).
THEME = """<div class="bd-main">
<button class="btn search-button-field search-button__button pst-js-only" title="Search" aria-label="Search" data-bs-placement="bottom" data-bs-toggle="tooltip">
<button class="btn btn-sm pst-navbar-icon search-button search-button__button pst-js-only" title="Search" aria-label="Search" data-bs-placement="bottom" data-bs-toggle="tooltip">
<i class="theme-switch fa-solid fa-sun                fa-lg" data-mode="light" title="Light"></i>
<i class="theme-switch fa-solid fa-moon               fa-lg" data-mode="dark"  title="Dark"></i>
<summary aria-label="Toggle hidden content">
<div class="citation" id="id12" role="doc-biblioentry">
<div class="sidebar-primary-item">
<a class="navbar-brand logo" href="#">
    <p class="title logo__title">Softmax as Linear Attention</p>
</a></div>
"""


def test_figure_specs_reads_plotlys_html_back():
    fig = go.Figure(go.Heatmap(z=[[1, 2]]), layout=dict(title="a, b", sliders=[dict(steps=[dict(label="x")])]))
    html = pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id="fig-1")
    ((div_id, found),) = accessible.figure_specs(html)
    assert div_id == "fig-1" and found["data"][0]["type"] == "heatmap"
    assert found["layout"]["title"]["text"] == "a, b" and found["layout"]["sliders"][0]["steps"][0]["label"] == "x"


def test_theme_fixes():
    fixed = THEME
    for _, pattern, replacement in accessible.THEME_FIXES:
        fixed = pattern.sub(replacement, fixed)
    assert '<button class="btn search-button-field search-button__button pst-js-only" title="Search" data-bs' in fixed
    assert 'search-button search-button__button pst-js-only" title="Search" aria-label="Search"' in fixed  # icon only
    assert 'title="Light"' not in fixed and 'title="Dark"' not in fixed and 'data-mode="dark"' in fixed
    assert "<summary>" in fixed and 'id="id12" role="listitem"' in fixed
    assert '<nav aria-label="Home"><a class="navbar-brand logo" href="#">' in fixed and "</a></nav></div>" in fixed
    again = fixed
    for _, pattern, replacement in accessible.THEME_FIXES:  # a page fixed by an earlier build is left as it is
        again = pattern.sub(replacement, again)
    assert again.count("<nav") == 1
    for _, present, wrong in accessible.EVERY_PAGE:  # what the build checks on every page
        assert present in fixed and not wrong.search(fixed) and wrong.search(THEME)
