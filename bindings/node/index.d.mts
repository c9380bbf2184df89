// Types of the ESM entry point: the CommonJS API as named exports, and the whole
// module object as the default export.
export * from './index.js';
import * as sandtrap from './index.js';
export default sandtrap;
