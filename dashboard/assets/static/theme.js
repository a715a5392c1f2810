// Runs before the first paint (a plain script in <head>): sets the theme the
// user chose last (localStorage) or, without one, the system's, so a dark
// page never flashes light.
(function () {
  var chosen = null;
  try { chosen = localStorage.getItem('fibril-theme'); } catch (e) { /* storage off */ }
  var dark = chosen ? chosen === 'dark' : window.matchMedia && window.matchMedia('(prefers-color-scheme: dark)').matches;
  document.documentElement.setAttribute('data-theme', dark ? 'dark' : 'light');
})();
