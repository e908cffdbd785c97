// sbx.js: what htmx's configuration cannot say. A request that gets an
// answer, 4xx and 5xx included, is swapped by htmx itself (responseHandling
// in views/layout.templ). A request that gets none (the network failed, the
// gateway stopped) swaps nothing, and a panel would say "Loading…" for
// ever: here its target says so instead, with a Retry button that sends the
// same GET again. Served from 'self' under the CSP's script-src 'self': no
// inline handler, no eval, text only (textContent, never innerHTML).
(function () {
	'use strict';

	document.addEventListener('htmx:sendError', function (ev) {
		var d = ev.detail || {};
		var target = d.target;
		var path = d.pathInfo && (d.pathInfo.finalRequestPath || d.pathInfo.requestPath);
		// Only a GET is sent again: a POST that may have arrived is the
		// user's to repeat.
		if (!target || !target.isConnected || !path || !d.requestConfig || d.requestConfig.verb !== 'get') {
			return;
		}
		var p = document.createElement('p');
		p.className = 'error';
		p.setAttribute('role', 'alert');
		p.textContent = 'Could not reach the gateway: the network failed or the gateway stopped. ';
		var retry = document.createElement('button');
		retry.type = 'button';
		retry.className = 'retry';
		retry.textContent = 'Retry';
		retry.addEventListener('click', function () {
			var wait = document.createElement('p');
			wait.className = 'loading';
			wait.textContent = 'Retrying…';
			target.replaceChildren(wait);
			window.htmx.ajax('GET', path, {target: target, swap: 'innerHTML'});
		});
		p.appendChild(retry);
		target.replaceChildren(p);
	});
})();
