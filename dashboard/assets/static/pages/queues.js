import { start } from '../dash.js';

start(() => {});
