// MathJax 3 settings for the whole site, read before MathJax loads (MathJax
// itself is served by the site: assets/mathjax/, see docs/offline_assets_hook.py).
// Only two kinds of element are typeset, each with everything inside it:
// * pages: pymdownx.arithmatex writes \( \) and \[ \] inside class="arithmatex";
// * notebooks: their Markdown cells (class="jp-RenderedMarkdown") use $ $ and
//   $$ $$, in paragraphs, list items and table cells that carry no class.
// Everything else (code, cell outputs, prose with dollar signs) is left alone.
// (An ignoreHtmlClass that matches every class, the empty one included, would
// also skip the class-less paragraphs inside a notebook's Markdown cell.)
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"], ["$", "$"]],
    displayMath: [["\\[", "\\]"], ["$$", "$$"]],
    processEscapes: true,
  },
  startup: {
    elements: [".arithmatex", ".jp-RenderedMarkdown"],
  },
};
