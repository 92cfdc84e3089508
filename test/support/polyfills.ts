import '../../local/polyfills.ts';
