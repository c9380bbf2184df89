/* Compiles the public header on its own, as C99 and pedantic. */
#include "sandtrap.h"
int main(void) { return SANDTRAP_ABI_VERSION == 2 ? 0 : 1; }
