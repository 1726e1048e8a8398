// MathJax 3 settings for the whole site, read before MathJax loads.
// Pages: pymdownx.arithmatex writes \( \) and \[ \] inside class="arithmatex".
// Notebooks: their Markdown cells use $ $ and $$ $$ (class="jp-RenderedMarkdown").
// Everything else (code, prose with dollar signs) is left alone.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"], ["$", "$"]],
    displayMath: [["\\[", "\\]"], ["$$", "$$"]],
    processEscapes: true,
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex|jp-RenderedMarkdown",
  },
};
