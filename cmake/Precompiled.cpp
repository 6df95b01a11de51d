// The translation unit that builds cmake/Precompiled.h (see there).
