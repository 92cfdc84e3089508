// tsx's two loaders, as `eos` runs TypeScript without a build step. Both are needed: a user's `.ts` transform in a
// folder without a package.json of `"type": "module"` is compiled to CommonJS, which the ES module loader alone
// hands to Node's require(esm) ("Cannot require() ES Module … in a cycle").
import { register as registerCommonJs } from 'tsx/cjs/api';
import { register } from 'tsx/esm/api';

register();
registerCommonJs();
