import { start, setText } from '../dash.js';

start(() => { setText('nf-path', location.pathname); });
