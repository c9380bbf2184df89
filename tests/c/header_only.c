/* Compiles the public header on its own, as C99 and pedantic. */
#include "sandtrap.h"
int main(void) { return SANDTRAP_ABI_VERSION == 1 ? 0 : 1; }
