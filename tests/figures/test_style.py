"""The figures' style: slider figures show their own panel; every figure has a text alternative; the
colours that carry meaning stay apart for colour-blind readers."""
import itertools
import json

import numpy as np
import plotly.graph_objects as go
import pytest

from softmax_as_linear.figures import style


def test_fixed_traces_show_under_every_panel():
    panels = [(f"p{i}", [go.Scatter(x=[i], y=[i]), go.Scatter(x=[i], y=[-i])]) for i in range(3)]
    fixed = [go.Scatter(x=[0, 1], y=[0, 1], name="fixed")]
    fig = style.slider_figure(panels, slider_label="i", active=1, fixed=fixed)
    assert len(fig.data) == 1 + 3 * 2
    assert fig.data[0].name == "fixed" and fig.data[0].visible is not False
    assert [t.visible for t in fig.data[1:]] == [False, False, True, True, False, False]
    for index, step in enumerate(fig.layout.sliders[0].steps):
        visible = step.args[0]["visible"]
        assert visible == [True] + [owner == index for owner in (0, 0, 1, 1, 2, 2)]


def test_without_fixed_traces_the_steps_are_unchanged():
    panels = [("a", [go.Scatter(x=[0], y=[0])]), ("b", [go.Scatter(x=[1], y=[1])])]
    fig = style.slider_figure(panels, slider_label="s")
    assert [step.args[0]["visible"] for step in fig.layout.sliders[0].steps] == [[True, False], [False, True]]


def test_bad_active_panel():
    with pytest.raises(ValueError, match="active"):
        style.slider_figure([("a", [go.Scatter(x=[0], y=[0])])], slider_label="s", active=3)


# --- text alternatives ----------------------------------------------------------------------------

def _slider_figure():
    panels = [(f"{L:,}", [go.Scatter(x=[1, 10], y=[L, L / 10], name="softmax", mode="lines")]) for L in (10, 100, 1000)]
    fixed = [go.Scatter(x=[1, 10], y=[1, 1], name="limit <i>T</i>[μ]", mode="lines")]
    return style.slider_figure(panels, slider_label="prompt length L", active=1, fixed=fixed,
                               title="Gap<br><sup>three lengths</sup>", xtitle="prompt length L",
                               ytitle="gap E_L", logx=True, logy=True)


def test_describe_names_the_figure_by_its_title_and_says_what_it_shows():
    name, caption = style.describe(_slider_figure().to_plotly_json())
    assert name == "Gap — three lengths"
    assert caption.startswith("Line chart: Gap — three lengths.")
    assert "Horizontal axis: prompt length L (logarithmic); vertical axis: gap E_L (logarithmic)." in caption
    assert "Series: limit T[μ]; softmax." in caption  # tags dropped, each legend name once
    assert ("A slider sets prompt length L to one of 3 values (10; 100; 1,000); "
            "the figure opens at prompt length L = 100.") in caption


def test_describe_kinds_and_a_long_legend():
    heatmap = go.Figure(go.Heatmap(z=[[1, 2], [3, 4]]))
    assert style.describe(heatmap.to_plotly_json()) == ("Heatmap", "Heatmap.")
    points = go.Figure([go.Scatter(x=[0], y=[0], mode="markers", name=f"seed {i}") for i in range(11)])
    name, caption = style.describe(points.to_plotly_json())
    assert name == "Scatter plot" and "seed 0; seed 1;" in caption and "seed 7; and 3 more." in caption


def test_show_stores_the_figure_with_its_text_alternative(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda bundle, raw: shown.append(bundle))
    fig = _slider_figure()
    style.show(fig)
    html, spec = shown[0]["text/html"], shown[0]["application/vnd.plotly.v1+json"]
    name, caption = style.describe(spec)
    div_id = html.split(' id="', 1)[1].split('"')[0]  # the plotly <div>, the first id in the figure
    assert html.startswith(f'<figure class="sal-figure" aria-label="{name}" aria-describedby="{div_id}-caption">')
    assert f'<figcaption id="{div_id}-caption" class="sal-figure-caption">' in html
    assert json.dumps(caption, ensure_ascii=False)[1:-1].replace("&", "&amp;") in html
    assert 'class="plotly-graph-div"' in html and html.endswith("</figcaption></figure>")


def test_accessible_figure_escapes_the_text():
    fig = go.Figure(go.Scatter(x=[0], y=[0], name='a "quoted" <b>name</b>'), layout=dict(title="x < y & z"))
    html = style.accessible_figure("<div></div>", fig.to_plotly_json(), "fig-1")
    assert 'aria-label="x &lt; y &amp; z"' in html and "a &quot;quoted&quot; name" in html


# --- colours for colour-blind readers -------------------------------------------------------------
# Machado, Oliveira & Fernandes (2009): full-strength protanopia, deuteranopia and tritanopia as
# linear maps of linear-light sRGB; distances are CIE76 differences in CIELAB (D65).
CVD = {
    "normal": np.eye(3),
    "protanopia": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                            [-0.003882, -0.048116, 1.051998]]),
    "deuteranopia": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                              [-0.011820, 0.042940, 0.968881]]),
    "tritanopia": np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                            [0.004733, 0.691367, 0.303900]]),
}


def _linear_rgb(color: str, opacity: float = 1.0) -> np.ndarray:
    srgb = (1 - opacity) + opacity * np.array([int(color.lstrip("#")[i:i + 2], 16) / 255 for i in (0, 2, 4)])
    return np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)


def _lab(linear: np.ndarray) -> np.ndarray:
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ linear
    t = xyz / np.array([0.95047, 1.0, 1.08883])  # relative to the D65 white
    f = np.where(t > (6 / 29) ** 3, np.cbrt(t), t / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def _distance(a: str, b: str, vision: str, opacity: float = 1.0) -> float:
    """CIE76 distance between colours ``a`` and ``b`` (drawn at ``opacity`` on white) as seen with ``vision``."""
    seen = [_lab(np.clip(CVD[vision] @ _linear_rgb(c, opacity), 0, 1)) for c in (a, b)]
    return float(np.linalg.norm(seen[0] - seen[1]))


@pytest.mark.parametrize("vision", CVD)
def test_softmax_and_linear_stay_apart(vision):
    softmax, linear = style.COLORS["softmax"], style.COLORS["linear"]
    assert _distance(softmax, linear, vision) > 40  # lines
    assert _distance(softmax, linear, vision, opacity=0.18) > 12  # seed bands (style.band's opacity)


@pytest.mark.parametrize("vision", CVD)
def test_laws_stay_apart(vision):
    every_law = {**style.TOKEN_LAW_COLORS, **style.COVARIATE_COLORS}
    pairs = itertools.combinations(set(every_law.values()), 2)
    assert min(_distance(a, b, vision) for a, b in pairs) > 20


def test_token_laws_and_covariate_laws_have_their_own_maps_and_a_name_one_colour():
    """Token laws (Chapters 1-3) and covariate laws (Chapter 6) each have their colour map; a name both use
    ("gaussian", "uniform") has one colour in both, and distinct laws of one map distinct colours."""
    from softmax_as_linear.figures import beyond_gaussian, measure_view
    from softmax_as_linear.registry import COVARIATES, LAW_KINDS
    assert tuple(style.TOKEN_LAW_COLORS) == LAW_KINDS and tuple(style.COVARIATE_COLORS) == COVARIATES
    for colours in (style.TOKEN_LAW_COLORS, style.COVARIATE_COLORS):
        assert len(set(colours.values())) == len(colours)
    shared = set(LAW_KINDS) & set(COVARIATES)
    assert shared == {"gaussian", "uniform"}
    assert all(style.TOKEN_LAW_COLORS[name] == style.COVARIATE_COLORS[name] for name in shared)
    # Rademacher, a covariate law only, takes no token law's colour
    assert style.COVARIATE_COLORS["rademacher"] not in style.TOKEN_LAW_COLORS.values()
    fig = beyond_gaussian.tilted_entry_figure([0.0, 1.0], {name: [0.0, 0.5] for name in COVARIATES})
    assert [trace.line.color for trace in fig.data] == [style.COVARIATE_COLORS[name] for name in COVARIATES]
    lengths = [10, 100, 1000]
    fig = measure_view.lln_figure(lengths, {kind: [1.0, 0.3, 0.1] for kind in LAW_KINDS}, n_prompts=8)
    assert [trace.line.color for trace in fig.data[:len(LAW_KINDS)]] == [style.TOKEN_LAW_COLORS[k] for k in LAW_KINDS]


def _contrast_on_white(color: str) -> float:
    luminance = float(np.array([0.2126, 0.7152, 0.0722]) @ _linear_rgb(color))
    return 1.05 / (luminance + 0.05)


def test_every_colour_has_contrast_on_white():
    """WCAG 1.4.11: graphical objects that carry meaning need 3:1 against their background."""
    for color in [*style.COLORS.values(), *style.SEQUENCE]:
        assert _contrast_on_white(color) >= 3.0, color


def test_wrap_keeps_words_whole_and_lines_short():
    text = "The best one-layer risks at each L against the L = ∞ references"
    wrapped = style.wrap(text, 20)
    assert wrapped.replace("<br>", " ") == text and all(len(line) <= 20 for line in wrapped.split("<br>"))
    assert style.wrap("short", 20) == "short" and style.wrap("a<br>b", 20) == "a<br>b"
    assert style.wrap("averyveryverylongword x", 5) == "averyveryverylongword<br>x"


def test_a_wrapped_title_reads_as_one_line_and_a_subtitle_as_a_dash():
    assert style._plain("Two lines<br>of one title") == "Two lines of one title"
    assert style._plain("Gap<br><sup>three lengths</sup>") == "Gap — three lengths"


def test_fit_phone_wraps_the_title_and_puts_the_legend_below():
    fig = style.new_figure("A title far longer than what a phone shows on one line of its screen", "x",
                           "an axis title that is much too long for the height of the axes of this figure here")
    fig.add_trace(go.Scatter(x=[1, 2], y=[1, 2], name="a legend entry whose name is long enough to need two lines"))
    fig.add_trace(go.Scatter(x=[1, 2], y=[2, 1], name="hidden", showlegend=False))
    before = fig.layout.height
    style.fit_phone(fig)
    assert fig.layout.title.text.count("<br>") == 1 and fig.layout.margin.t == 60 + style.TITLE_LINE_PX
    assert "<br>" in fig.layout.yaxis.title.text and fig.layout.margin.l == 86
    assert fig.data[0].name.count("<br>") == 1 and fig.data[1].name == "hidden"
    assert fig.layout.legend.orientation == "h" and fig.layout.height == before + style.TITLE_LINE_PX + 30 + 22 * 2
