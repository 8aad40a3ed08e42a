// Sign-in: an API key in, a session cookie out.

import * as api from '../api.js';
import { h, fill, notice } from '../dom.js';

export function render(main, _params, { signedIn }) {
  const error = h('div', { 'data-testid': 'signin-error', class: 'signin-error' });
  const key = h('input', {
    id: 'signin-key', name: 'key', type: 'password', required: true, autocomplete: 'off',
    spellcheck: 'false', 'data-testid': 'signin-key',
  });
  const submit = h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'signin-submit' }, 'Sign in');
  const form = h('form', {
    class: 'signin',
    onsubmit: async (event) => {
      event.preventDefault();
      fill(error);
      submit.disabled = true;
      try {
        await api.signIn(key.value.trim());
        key.value = '';
        await signedIn();
      } catch (e) {
        fill(error, notice(e.status === 401 ? 'That key was not accepted.' : e.message));
        key.focus();
        key.select();
      } finally {
        submit.disabled = false;
      }
    },
  },
  h('h1', null, h('span', { class: 'brand-mark', 'aria-hidden': 'true' }, '▍'), 'shellgate console'),
  h('p', { class: 'muted' }, 'Sign in with an API key. You see the containers, responses and usage of its project.'),
  h('label', { for: 'signin-key' }, 'API key'),
  key,
  error,
  submit);
  fill(main, form);
  key.focus();
}
